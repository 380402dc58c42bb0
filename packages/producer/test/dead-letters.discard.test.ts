import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  discardDeadLetters,
  enqueue,
  listAudit,
  listDeadLetters,
  type OnExhausted,
  OutboxError,
  Relay,
  redrive,
  silentLogger,
  stats,
} from '../src/index.js'
import { laneRows, seedEvents, waitForLockWaiters } from './support.js'

const t = useTestDatabase()

/** Sequences the sink fails; the status it fails them with is chosen per aggregate id. */
const failing = new Set<number>()
const statusOf = new Map<string, number>()
let sink: Sink

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane, outbox_audit`.execute(t.db)
  failing.clear()
  statusOf.clear()
  sink = await startSink((request) =>
    failing.has(request.json.sequence)
      ? { status: statusOf.get(request.json.aggregate_id) ?? 500 }
      : { status: 200, body: { status: 'applied' } },
  )
})

afterEach(async () => {
  await sink.close()
  expect((await checkIntegrity(t.db)).violations).toEqual([])
})

/** One claim-and-deliver cycle of a relay that gives up at the first failure. */
async function deliverOnce(onExhausted: OnExhausted): Promise<void> {
  await new Relay({
    db: t.db,
    endpoint: sink.url,
    retrySchedule: [],
    onExhausted,
    logger: silentLogger,
  }).runOnce()
}

async function blockedReason(aggregateId: string): Promise<string | null> {
  const lane = await t.db
    .selectFrom('outbox_lane')
    .select('blocked_reason')
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirstOrThrow()
  return lane.blocked_reason as string | null
}

/** The sequences the sink received for one aggregate, in arrival order. */
function received(aggregateId: string): number[] {
  return sink.requests
    .filter((request) => request.json.aggregate_id === aggregateId)
    .map((request) => request.json.sequence as number)
}

describe('redrive by filter', () => {
  it('a dry run changes nothing and lists exactly what the real run then redrives', async () => {
    await seedEvents(t.db, ['r1', 'r2', 'r3'], 1)
    failing.add(1)
    statusOf.set('r1', 503).set('r2', 503).set('r3', 410)
    await deliverOnce('skip')
    expect(await listDeadLetters(t.db)).toHaveLength(3)

    const preview = await redrive(t.db, { filter: { status: 503 }, dryRun: true })
    expect(preview.dryRun).toBe(true)
    expect(preview.redriven).toHaveLength(2)
    // Nothing changed: still three dead letters, no audit row.
    expect(await listDeadLetters(t.db)).toHaveLength(3)
    expect(await listAudit(t.db)).toEqual([])

    const real = await redrive(t.db, { filter: { status: 503 }, actor: 'ops-test' })
    expect(real.dryRun).toBe(false)
    expect([...real.redriven].sort()).toEqual([...preview.redriven].sort())
    expect(real.deliveries).toHaveLength(preview.deliveries.length)
    const left = await listDeadLetters(t.db)
    expect(left.map((one) => one.aggregateId)).toEqual(['r3'])
    const [audit] = await listAudit(t.db)
    expect(audit).toMatchObject({
      actor: 'ops-test',
      action: 'dead-letters.redrive',
      target: { filter: { status: 503 } },
      result: { redriven: 2, deliveries: 2, notDead: 0 },
    })

    failing.clear()
    await deliverOnce('skip')
    expect(received('r1')).toEqual([1, 1])
    expect(received('r2')).toEqual([1, 1])
    expect(received('r3')).toEqual([1])
    expect(await stats(t.db)).toMatchObject({ pending: 0, dead: 1 })
  })

  it('the old forms still work, and a dry run of ids reports the ids that are not dead', async () => {
    await seedEvents(t.db, ['o1'], 1)
    failing.add(1)
    await deliverOnce('skip')
    const [dead] = await listDeadLetters(t.db)
    const unknown = '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a'
    const preview = await redrive(t.db, { eventIds: [dead!.eventId, unknown], dryRun: true })
    expect(preview).toMatchObject({ dryRun: true, redriven: [dead!.eventId], notDead: [unknown] })
    expect(await listDeadLetters(t.db)).toHaveLength(1)
    expect(await redrive(t.db, { all: true })).toMatchObject({ dryRun: false, redriven: [dead!.eventId] })
    expect((await listAudit(t.db))[0]).toMatchObject({ actor: 'api', target: { all: true } })
    await expect(redrive(t.db, { filter: { status: 99 } })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'status',
    })
    await expect(redrive(t.db, { all: true, actor: '' })).rejects.toMatchObject({ option: 'actor' })
  })
})

describe('discardDeadLetters', () => {
  it('deletes a dead letter that blocks nothing, audited, and reports ids that were not dead', async () => {
    await seedEvents(t.db, ['s1', 's2'], 2)
    failing.add(1)
    await deliverOnce('skip')
    const dead = await listDeadLetters(t.db)
    expect(dead).toHaveLength(2)
    expect(dead.every((one) => !one.blocksLane)).toBe(true)
    const target = dead.find((one) => one.aggregateId === 's1')!
    const { rows: sent } = await sql<{ event_id: string }>`
      SELECT event_id FROM outbox WHERE status = 'pending' AND aggregate_id = 's1'`.execute(t.db)

    const result = await discardDeadLetters(t.db, {
      eventIds: [target.eventId, sent[0]!.event_id],
      actor: 'me',
    })
    expect(result).toEqual({
      dryRun: false,
      discarded: [{ eventId: target.eventId, subscriptionId: target.subscriptionId }],
      unblocked: [],
      notDead: [sent[0]!.event_id],
    })
    // The pending row is never touched; the other dead letter stays.
    expect(await laneRows(t.db, 's1')).toEqual([[2, 'pending', false]])
    expect((await listDeadLetters(t.db)).map((one) => one.aggregateId)).toEqual(['s2'])
    expect(await listAudit(t.db)).toMatchObject([
      {
        actor: 'me',
        action: 'dead-letters.discard',
        target: { eventIds: [target.eventId, sent[0]!.event_id], unblockLanes: false },
        result: { discarded: 1, unblocked: 0, notDead: 1 },
      },
    ])
  })

  it('a dry run by filter reports and changes nothing; a discard needs ids or a filter', async () => {
    await seedEvents(t.db, ['f1', 'f2'], 1)
    failing.add(1)
    statusOf.set('f1', 410)
    await deliverOnce('skip')
    const preview = await discardDeadLetters(t.db, { filter: { status: 410 }, dryRun: true })
    expect(preview.dryRun).toBe(true)
    expect(preview.discarded).toHaveLength(1)
    expect(await listDeadLetters(t.db)).toHaveLength(2)
    expect(await listAudit(t.db)).toEqual([])
    await expect(discardDeadLetters(t.db, {})).rejects.toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION' })
    await expect(discardDeadLetters(t.db, { eventIds: [], filter: { status: 410 } })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
    })
    const real = await discardDeadLetters(t.db, { filter: { status: 410 } })
    expect(real.discarded).toEqual(preview.discarded)
    expect((await listDeadLetters(t.db)).map((one) => one.aggregateId)).toEqual(['f2'])
  })

  it("refuses a lane's blocker without unblockLanes: nothing deleted, the lane still blocked", async () => {
    await seedEvents(t.db, ['blk', 'free'], 3)
    failing.add(1)
    await deliverOnce('block')
    const dead = await listDeadLetters(t.db)
    expect(dead.map((one) => [one.aggregateId, one.blocksLane])).toEqual(
      expect.arrayContaining([
        ['blk', true],
        ['free', true],
      ]),
    )
    const ids = dead.map((one) => one.eventId)
    for (const dryRun of [true, false]) {
      const error = await discardDeadLetters(t.db, { eventIds: ids, dryRun }).catch(
        (caught: unknown) => caught,
      )
      expect(error).toBeInstanceOf(OutboxError)
      expect(error).toMatchObject({ code: 'ERR_OUTBOX_REFUSED' })
      expect((error as Error).message).toMatch(
        /pass unblockLanes: true \(--unblock\) to resume those lanes as if their dead letter had been skipped/,
      )
      expect((error as Error).message).toContain(`order/blk of subscription`)
    }
    expect(await listDeadLetters(t.db)).toHaveLength(2)
    expect(await blockedReason('blk')).toBe('exhausted')
    expect(await laneRows(t.db, 'blk')).toEqual([
      [1, 'dead', false],
      [2, 'pending', true],
      [3, 'pending', true],
    ])
    expect(await listAudit(t.db)).toEqual([])
  })

  it('with unblockLanes: the blocker is gone, the lane resumes and delivers the rest in order', async () => {
    await seedEvents(t.db, ['blk'], 3)
    failing.add(1)
    await deliverOnce('block')
    const [dead] = await listDeadLetters(t.db)

    const preview = await discardDeadLetters(t.db, {
      eventIds: [dead!.eventId],
      unblockLanes: true,
      dryRun: true,
    })
    expect(preview).toMatchObject({
      dryRun: true,
      unblocked: [{ aggregateType: 'order', aggregateId: 'blk', released: 2 }],
    })
    expect(await blockedReason('blk')).toBe('exhausted')

    const result = await discardDeadLetters(t.db, { eventIds: [dead!.eventId], unblockLanes: true })
    expect(result).toEqual({
      dryRun: false,
      discarded: [{ eventId: dead!.eventId, subscriptionId: dead!.subscriptionId }],
      unblocked: [
        { subscriptionId: dead!.subscriptionId, aggregateType: 'order', aggregateId: 'blk', released: 2 },
      ],
      notDead: [],
    })
    expect(await blockedReason('blk')).toBeNull()
    expect(await laneRows(t.db, 'blk')).toEqual([
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    expect((await listAudit(t.db))[0]).toMatchObject({
      action: 'dead-letters.discard',
      target: { unblockLanes: true },
      result: { discarded: 1, unblocked: 1, released: 2 },
    })
    failing.clear()
    await deliverOnce('block')
    expect(received('blk')).toEqual([1, 2, 3])
    expect(await stats(t.db)).toMatchObject({ pending: 0, dead: 0, blocked: 0 })
  })

  it('an older dead letter behind no block is discarded without unblocking; the blocker stays', async () => {
    await seedEvents(t.db, ['two'], 3)
    failing.add(1)
    await deliverOnce('skip')
    failing.add(2)
    await deliverOnce('block')
    const dead = await listDeadLetters(t.db)
    expect(dead.map((one) => [one.sequence, one.blocksLane])).toEqual([
      [1, false],
      [2, true],
    ])
    const result = await discardDeadLetters(t.db, { eventIds: [dead[0]!.eventId] })
    expect(result.unblocked).toEqual([])
    expect(await blockedReason('two')).toBe('exhausted')
    expect(await laneRows(t.db, 'two')).toEqual([
      [2, 'dead', false],
      [3, 'pending', true],
    ])
  })
})

describe('discard against a concurrent enqueue', () => {
  it('waits for an open enqueue of the blocked aggregate, then releases the row it wrote at infinity', async () => {
    await seedEvents(t.db, ['racing'], 2)
    failing.add(1)
    await deliverOnce('block')
    const [dead] = await listDeadLetters(t.db)

    const open = await t.db.startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      aggregateId: 'racing',
      eventType: 'order.updated',
      payload: {},
    })
    const discarding = discardDeadLetters(t.connect({ max: 1 }), {
      eventIds: [dead!.eventId],
      unblockLanes: true,
    })
    await waitForLockWaiters(t.db)
    await open.commit().execute()
    const result = await discarding
    expect(result.unblocked).toMatchObject([{ aggregateId: 'racing', released: 2 }])
    expect(await laneRows(t.db, 'racing')).toEqual([
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    failing.clear()
    await deliverOnce('block')
    expect(received('racing')).toEqual([1, 2, 3])
  })

  it('a discard of a blocker and a redrive of it, racing, leave one outcome and a live lane', async () => {
    await seedEvents(t.db, ['both'], 2)
    failing.add(1)
    await deliverOnce('block')
    const [dead] = await listDeadLetters(t.db)
    const open = await t.db.startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      aggregateId: 'both',
      eventType: 'order.updated',
      payload: {},
    })
    const discarding = discardDeadLetters(t.connect({ max: 1 }), {
      eventIds: [dead!.eventId],
      unblockLanes: true,
    })
    const redriving = redrive(t.connect({ max: 1 }), { eventIds: [dead!.eventId] })
    await waitForLockWaiters(t.db, 2)
    await open.commit().execute()
    const [discarded, redriven] = await Promise.all([discarding, redriving])
    // Exactly one of them took the dead letter.
    expect(discarded.discarded.length + redriven.redriven.length).toBe(1)
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    failing.clear()
    await deliverOnce('block')
    const got = received('both')
    expect(got.slice(-2)).toEqual([2, 3])
  })
})
