import { type Sink, type SinkAnswer, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import {
  createSubscription,
  deleteSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  listDeadLetters,
  listSubscriptions,
  OutboxError,
  Relay,
  type RelayOptions,
  type ReplayProgress,
  redrive,
  replay,
  silentLogger,
} from '../src/index.js'
import { expectLanesLive } from './support.js'

const t = useTestDatabase()
const sinks: Sink[] = []

async function sink(respond?: (request: Sink['requests'][number]) => SinkAnswer): Promise<Sink> {
  const started = await startSink(respond)
  sinks.push(started)
  return started
}

function storedRelay(options: Partial<RelayOptions> = {}): Relay {
  return new Relay({ db: t.db, allowPrivateNetworks: true, logger: silentLogger, ...options })
}

/** Runs claim-and-deliver cycles until one finds nothing due. */
async function drain(relay: Relay): Promise<void> {
  for (let cycle = 0; cycle < 50; cycle++) {
    const { delivered, failed, dead } = await relay.runOnce()
    if (delivered + failed + dead === 0) return
  }
  throw new Error('the relay never ran out of due events')
}

async function publish(aggregateId: string, count = 1): Promise<void> {
  for (let n = 0; n < count; n++) {
    await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
      )
  }
}

/** The database's clock: what created_at is written with. */
async function databaseNow(): Promise<Date> {
  const { rows } = await sql<{ now: Date }>`SELECT clock_timestamp() AS now`.execute(t.db)
  return rows[0]!.now
}

/** Each aggregate's (sequence, event id) pairs as one sink received them, from request `from` on. */
function received(target: Sink, from = 0): Map<string, [number, string][]> {
  const lanes = new Map<string, [number, string][]>()
  for (const request of target.requests.slice(from)) {
    const key = request.json.aggregate_id as string
    lanes.set(key, [...(lanes.get(key) ?? []), [request.json.sequence, request.json.event_id]])
  }
  return lanes
}

/** One subscription's rows of an aggregate: [sequence, status, due now or earlier, at infinity]. */
async function rowsOf(subscriptionId: string, aggregateId: string) {
  const { rows } = await sql<{ sequence: string; status: string; due: boolean; at_infinity: boolean }>`
    SELECT sequence, status, available_at <= now() AS due, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE subscription_id = ${subscriptionId} AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(
    t.db,
  )
  return rows.map((row) => [Number(row.sequence), row.status, row.due, row.at_infinity] as const)
}

beforeAll(async () => {
  // Only the stored subscriptions of each test receive events.
  await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
})

afterEach(async () => {
  await Promise.all(sinks.splice(0).map((started) => started.close()))
  await expectLanesLive(t.db)
  for (const subscription of await listSubscriptions(t.db)) {
    if (!subscription.implicit) await deleteSubscription(t.db, subscription.id)
  }
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

describe('replay to one subscription', () => {
  it("re-sends exactly that subscription's events created since T, in order, with their ids and sequences", async () => {
    const [one, two] = [await sink(), await sink()]
    const a = await createSubscription(t.db, { url: one.url, name: 'replay-a' })
    const b = await createSubscription(t.db, { url: two.url, name: 'replay-b' })
    await publish('r1', 2)
    await publish('r2')
    const since = await databaseNow()
    await publish('r1', 2)
    await publish('r2', 2)
    await publish('r3')
    const relay = storedRelay()
    await drain(relay)
    expect([one.requests.length, two.requests.length]).toEqual([8, 8])
    const original = new Map(one.requests.map((request) => [request.json.event_id, request.json.sequence]))
    const { rows: before } = await sql<{ id: string; sent_at: Date }>`
      SELECT id, sent_at FROM outbox WHERE subscription_id = ${b.id} ORDER BY id`.execute(t.db)

    const progress: ReplayProgress[] = []
    const result = await replay(t.db, {
      subscriptionId: 'replay-a',
      since,
      batchSize: 1,
      onProgress: (step) => progress.push(step),
    })
    expect(result).toEqual({ aggregates: 3, events: 5, skippedLeased: 0, complete: true })
    // One report per batch of one aggregate, counting up to the result.
    expect(progress).toEqual([
      { aggregates: 1, events: 2, pendingLeased: 0 },
      { aggregates: 2, events: 4, pendingLeased: 0 },
      { aggregates: 3, events: 5, pendingLeased: 0 },
    ])
    expect(await rowsOf(a.id, 'r1')).toEqual([
      [1, 'sent', true, false],
      [2, 'sent', true, false],
      [3, 'pending', true, false],
      [4, 'pending', true, false],
    ])
    // The other subscription's rows are untouched.
    const { rows: after } = await sql<{ id: string; sent_at: Date }>`
      SELECT id, sent_at FROM outbox WHERE subscription_id = ${b.id} AND status = 'sent' ORDER BY id`.execute(
      t.db,
    )
    expect(after).toEqual(before)

    await drain(relay)
    expect(two.requests).toHaveLength(8)
    const again = received(one, 8)
    expect(again.get('r1')?.map(([sequence]) => sequence)).toEqual([3, 4])
    expect(again.get('r2')?.map(([sequence]) => sequence)).toEqual([2, 3])
    expect(again.get('r3')?.map(([sequence]) => sequence)).toEqual([1])
    // Each replayed request is the original event: same id, same sequence.
    for (const [sequence, eventId] of [...again.values()].flat()) expect(original.get(eventId)).toBe(sequence)
    const { rows: pending } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM outbox WHERE status <> 'sent'`.execute(t.db)
    expect(Number(pending[0]!.n)).toBe(0)
  })

  it("sends the replayed events before the lane's newer pending ones, on every aggregate", async () => {
    const target = await sink()
    await createSubscription(t.db, { url: target.url, name: 'replay-order' })
    for (const id of ['o1', 'o2', 'o3']) await publish(id, 3)
    const relay = storedRelay()
    await drain(relay)
    // Newer events wait, pending, when the replay puts the older ones back.
    for (const id of ['o1', 'o2', 'o3']) await publish(id, 2)
    expect(await replay(t.db, { subscriptionId: 'replay-order', since: '1h' })).toMatchObject({ events: 9 })
    await drain(relay)
    const stream = received(target, 9)
    for (const id of ['o1', 'o2', 'o3']) {
      expect(stream.get(id)?.map(([sequence]) => sequence)).toEqual([1, 2, 3, 4, 5])
    }
  })

  it('keeps every liveness rule on a blocked lane, a 409-parked lane and a lane in backoff, and each resumes in order', async () => {
    // b: its 3rd event fails twice (dead, lane blocked); p: its 3rd is answered 409 (parked); r: its 3rd fails once.
    const answers = new Map<string, SinkAnswer>([
      ['b:3', { status: 500 }],
      ['p:3', { status: 409, body: { code: 'sequence_gap' } }],
      ['r:3', { status: 500 }],
    ])
    const target = await sink(
      (request) =>
        answers.get(`${request.json.aggregate_id}:${request.json.sequence}`) ?? {
          status: 200,
          body: { status: 'applied' },
        },
    )
    const { id } = await createSubscription(t.db, {
      url: target.url,
      name: 'replay-lanes',
      onExhausted: 'block',
      retrySchedule: [60_000],
    })
    for (const lane of ['b', 'p', 'r']) await publish(lane, 2)
    const relay = storedRelay()
    await drain(relay)
    for (const lane of ['b', 'p', 'r']) await publish(lane)
    await publish('b')
    await drain(relay)
    // b's head failed once: as if its retry delay had passed, so the second failure dead-letters it and blocks the lane.
    await sql`UPDATE outbox SET available_at = now(), first_failed_at = now() - interval '1 hour'
      WHERE aggregate_id = 'b' AND status = 'pending'`.execute(t.db)
    await drain(relay)
    expect(await rowsOf(id, 'b')).toEqual([
      [1, 'sent', true, false],
      [2, 'sent', true, false],
      [3, 'dead', true, false],
      [4, 'pending', false, true],
    ])
    const { rows: parked } = await sql<{ aggregate_id: string; blocked_reason: string | null }>`
      SELECT aggregate_id, blocked_reason FROM outbox_lane WHERE subscription_id = ${id} ORDER BY aggregate_id`.execute(
      t.db,
    )
    expect(parked).toEqual([
      { aggregate_id: 'b', blocked_reason: 'exhausted' },
      { aggregate_id: 'p', blocked_reason: 'conflict' },
      { aggregate_id: 'r', blocked_reason: null },
    ])
    await expectLanesLive(t.db)
    const seen = target.requests.length

    expect(await replay(t.db, { subscriptionId: id, since: '1h' })).toMatchObject({
      aggregates: 3,
      events: 6,
    })
    await expectLanesLive(t.db)
    // Blocked: the replayed rows come before the block and wait for it; the row behind it stays at infinity.
    expect(await rowsOf(id, 'b')).toEqual([
      [1, 'pending', true, false],
      [2, 'pending', true, false],
      [3, 'dead', true, false],
      [4, 'pending', false, true],
    ])
    // In backoff: the replayed rows are due when the waiting head is, not before.
    const { rows: due } = await sql<{ sequence: string; available_at: Date }>`
      SELECT sequence, available_at FROM outbox WHERE subscription_id = ${id} AND aggregate_id = 'r'
      ORDER BY sequence`.execute(t.db)
    expect(due.map((row) => row.available_at.getTime())).toEqual(
      Array(3).fill(due[2]!.available_at.getTime()),
    )
    expect(due[2]!.available_at.getTime()).toBeGreaterThan(Date.now() + 30_000)

    // Only the parked lane moves now: its park ended with its new head.
    answers.clear()
    await drain(relay)
    expect(
      received(target, seen)
        .get('p')
        ?.map(([sequence]) => sequence),
    ).toEqual([1, 2, 3])
    expect([...received(target, seen).keys()]).toEqual(['p'])
    // The block lifts with the redrive of its dead letter: everything in sequence order.
    const [blocker] = await listDeadLetters(t.db)
    await redrive(t.db, { eventIds: [blocker!.eventId] })
    await expectLanesLive(t.db)
    await drain(relay)
    expect(
      received(target, seen)
        .get('b')
        ?.map(([sequence]) => sequence),
    ).toEqual([1, 2, 3, 4])
    // The backoff ends (as if its time had come): the replayed rows first, then the head that waited.
    await sql`UPDATE outbox SET available_at = now() WHERE aggregate_id = 'r' AND status = 'pending'`.execute(
      t.db,
    )
    await drain(relay)
    expect(
      received(target, seen)
        .get('r')
        ?.map(([sequence]) => sequence),
    ).toEqual([1, 2, 3])
  })

  it('leaves dead letters dead and reports nothing to do for a range without sent events', async () => {
    const target = await sink((request) =>
      request.json.sequence === 1 ? { status: 500 } : { status: 200, body: { status: 'applied' } },
    )
    const { id } = await createSubscription(t.db, { url: target.url, retrySchedule: [] })
    await publish('d', 2)
    await drain(storedRelay())
    expect(await replay(t.db, { subscriptionId: id, since: '1h' })).toEqual({
      aggregates: 1,
      events: 1,
      skippedLeased: 0,
      complete: true,
    })
    expect(await rowsOf(id, 'd')).toEqual([
      [1, 'dead', true, false],
      [2, 'pending', true, false],
    ])
    const later = new Date(Date.now() + 3_600_000)
    expect(await replay(t.db, { subscriptionId: id, since: '1h', until: '30m' })).toEqual({
      aggregates: 0,
      events: 0,
      skippedLeased: 0,
      complete: true,
    })
    await expect(replay(t.db, { subscriptionId: id, since: later })).rejects.toMatchObject({
      option: 'since',
    })
  })

  it('refuses bad input with the option at fault, and an unknown subscription by name', async () => {
    await createSubscription(t.db, { url: 'https://example.com/hooks', name: 'replay-valid' })
    const refused = async (options: unknown) => {
      const error = await replay(t.db, options as never).then(
        () => undefined,
        (caught: unknown) => caught,
      )
      expect(error).toBeInstanceOf(OutboxError)
      return error as OutboxError
    }
    expect((await refused(undefined)).code).toBe('ERR_OUTBOX_INVALID_OPTION')
    expect(await refused({ since: '1h' })).toMatchObject({ option: 'subscriptionId' })
    expect(await refused({ subscriptionId: '', since: '1h' })).toMatchObject({ option: 'subscriptionId' })
    expect(await refused({ subscriptionId: 'replay-valid' })).toMatchObject({ option: 'since' })
    expect(await refused({ subscriptionId: 'replay-valid', since: 'yesterday' })).toMatchObject({
      option: 'since',
    })
    expect(await refused({ subscriptionId: 'replay-valid', since: new Date('nope') })).toMatchObject({
      option: 'since',
    })
    expect(await refused({ subscriptionId: 'replay-valid', since: -5 })).toMatchObject({ option: 'since' })
    expect(await refused({ subscriptionId: 'replay-valid', since: '1h', until: '2h' })).toMatchObject({
      option: 'until',
    })
    for (const batchSize of [0, 1.5, 10_001, Number.NaN]) {
      expect(await refused({ subscriptionId: 'replay-valid', since: '1h', batchSize })).toMatchObject({
        option: 'batchSize',
      })
    }
    expect(await refused({ subscriptionId: 'replay-valid', since: '1h', leaseWaitMs: 'soon' })).toMatchObject(
      {
        option: 'leaseWaitMs',
      },
    )
    expect(await refused({ subscriptionId: 'replay-valid', since: '1h', onProgress: 'log' })).toMatchObject({
      option: 'onProgress',
    })
    expect(await refused({ subscriptionId: 'replay-valid', since: '1h', signal: {} })).toMatchObject({
      option: 'signal',
    })
    const missing = await refused({ subscriptionId: 'no-such-subscription', since: '1h' })
    expect(missing.code).toBe('ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND')
    expect(missing.message).toContain('no-such-subscription')
  })
})
