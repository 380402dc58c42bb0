import { type Sink, type SinkAnswer, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { listLanes, type OnExhausted, Relay, silentLogger, stats } from '../src/index.js'
import { deferred, FAST_SCHEDULE, IMPLICIT_SUBSCRIPTION, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

/** What the sink answers per aggregate id (sequence → answer); everything else is applied. */
const answers = new Map<string, (sequence: number) => SinkAnswer | Promise<SinkAnswer>>()
let sink: Sink

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane, outbox_audit`.execute(t.db)
  answers.clear()
  sink = await startSink(
    (request) =>
      answers.get(request.json.aggregate_id)?.(request.json.sequence) ?? {
        status: 200,
        body: { status: 'applied' },
      },
  )
})

afterEach(async () => {
  await sink.close()
})

function relay(onExhausted: OnExhausted, retrySchedule: readonly number[] = []): Relay {
  return new Relay({ db: t.db, endpoint: sink.url, retrySchedule, onExhausted, logger: silentLogger })
}

describe('listLanes', () => {
  it('finds a lane blocked by a dead letter with its blocker and head, and a 409-parked lane', async () => {
    await seedEvents(t.db, ['blocked', 'parked', 'fine'], 3)
    answers.set('blocked', (sequence) => (sequence === 1 ? { status: 500 } : { status: 200 }))
    answers.set('parked', () => ({ status: 409, body: { code: 'sequence_gap' } }))
    await relay('block').runOnce()

    const lanes = await listLanes(t.db, { state: 'blocked' })
    // Both were blocked in one relay pass, in either order: the list is oldest block first.
    expect(lanes.map((lane) => [lane.aggregateId, lane.reason]).sort()).toEqual([
      ['blocked', 'exhausted'],
      ['parked', 'conflict'],
    ])
    expect(lanes[0]!.blockedAt!.getTime()).toBeLessThanOrEqual(lanes[1]!.blockedAt!.getTime())
    const blocked = lanes.find((lane) => lane.aggregateId === 'blocked')
    const parked = lanes.find((lane) => lane.aggregateId === 'parked')
    expect(blocked).toMatchObject({
      subscriptionId: IMPLICIT_SUBSCRIPTION,
      subscriptionName: 'default',
      aggregateType: 'order',
      state: 'blocked',
      leasedUntil: null,
      pending: 2,
      head: { sequence: 2, eventType: 'order.updated', attempts: 0, lastStatus: null, availableAt: null },
      blocker: { sequence: 1, lastStatus: 500 },
    })
    expect(blocked!.blockedAt).toBeInstanceOf(Date)
    expect(parked).toMatchObject({
      pending: 3,
      head: { sequence: 1, attempts: 0, lastStatus: 409 },
      blocker: null,
    })
    expect(parked!.head!.availableAt!.getTime()).toBeGreaterThan(Date.now() - 1000)
    // The list agrees with the counts stats gives.
    expect((await stats(t.db)).blocked).toBe(lanes.length)
    expect(await listLanes(t.db, { state: 'struggling' })).toEqual([])
  })

  it('finds a struggling lane (a head with 3 or more attempts)', async () => {
    await seedEvents(t.db, ['struggling', 'fine'], 2)
    answers.set('struggling', () => ({ status: 500 }))
    const retrying = relay('skip', FAST_SCHEDULE)
    await waitFor(async () => {
      await retrying.runOnce()
      return (await stats(t.db)).struggling === 1
    }, 'three failed attempts')

    const lanes = await listLanes(t.db, { state: 'struggling' })
    expect(lanes).toHaveLength(1)
    expect(lanes[0]).toMatchObject({
      aggregateId: 'struggling',
      state: 'struggling',
      reason: null,
      pending: 2,
      head: { sequence: 1, lastStatus: 500 },
      blocker: null,
    })
    expect(lanes[0]!.head!.attempts).toBeGreaterThanOrEqual(3)
    expect(await listLanes(t.db, { state: 'blocked' })).toEqual([])
  })

  it('finds a lane a relay holds under a live lease while its request is open', async () => {
    await seedEvents(t.db, ['held'], 2)
    const answer = deferred()
    answers.set('held', async () => {
      await answer.promise
      return { status: 200 }
    })
    const running = new Relay({ db: t.db, endpoint: sink.url, logger: silentLogger, pollIntervalMs: 20 })
    await running.start()
    try {
      await waitFor(() => sink.requests.length === 1, 'the request in flight')
      const lanes = await listLanes(t.db, { state: 'leased' })
      expect(lanes).toHaveLength(1)
      expect(lanes[0]).toMatchObject({
        aggregateId: 'held',
        state: 'leased',
        pending: 2,
        head: { sequence: 1 },
      })
      expect(lanes[0]!.leasedUntil!.getTime()).toBeGreaterThan(Date.now())
    } finally {
      answer.resolve()
      await running.stop()
    }
    expect(await listLanes(t.db, { state: 'leased' })).toEqual([])
  })

  it('filters by subscription and aggregate, and limits', async () => {
    await seedEvents(t.db, ['a', 'b', 'c'], 2)
    for (const id of ['a', 'b', 'c']) answers.set(id, () => ({ status: 409 }))
    await relay('skip').runOnce()
    expect(await listLanes(t.db, { state: 'blocked' })).toHaveLength(3)
    expect(await listLanes(t.db, { state: 'blocked', subscriptionId: IMPLICIT_SUBSCRIPTION })).toHaveLength(3)
    expect(
      await listLanes(t.db, { state: 'blocked', subscriptionId: '5d1c3b0e-8f7a-4e2b-9c61-2a4f0d9e7b13' }),
    ).toEqual([])
    const one = await listLanes(t.db, { state: 'blocked', aggregateType: 'order', aggregateId: 'b' })
    expect(one.map((lane) => lane.aggregateId)).toEqual(['b'])
    expect(await listLanes(t.db, { state: 'blocked', limit: 2 })).toHaveLength(2)
  })

  it('refuses bad options, naming them', async () => {
    await expect(listLanes(t.db, { state: 'stuck' as never })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'state',
    })
    await expect(listLanes(t.db, {} as never)).rejects.toMatchObject({ option: 'state' })
    await expect(listLanes(t.db, { state: 'blocked', subscriptionId: 'acme' })).rejects.toMatchObject({
      option: 'subscriptionId',
    })
    await expect(listLanes(t.db, { state: 'blocked', limit: 0 })).rejects.toMatchObject({ option: 'limit' })
    await expect(listLanes(t.db, { state: 'blocked', limit: 1.5 })).rejects.toMatchObject({ option: 'limit' })
  })
})
