import { setTimeout as sleep } from 'node:timers/promises'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { type ControlledTransaction, type Kysely, sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  enqueue,
  type IntegrityReport,
  type LaneRepairResult,
  type OnExhausted,
  Relay,
  repairIntegrity,
  silentLogger,
  stats,
} from '../src/index.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

/** The implicit subscription, as violations, findings and repairs of a single-endpoint outbox name it. */
const IMPLICIT = { subscriptionId: '00000000-0000-0000-0000-000000000000', subscriptionName: 'default' }

/** `aggregate_id:sequence` pairs the sink answers 500; everything else is applied. */
const failing = new Set<string>()
let sink: Sink
/** A transaction a test holds open on its own connection; rolled back after the test if the test did not end it. */
let open: ControlledTransaction<any> | undefined

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
  failing.clear()
  sink = await startSink((request) =>
    failing.has(`${request.json.aggregate_id}:${request.json.sequence}`)
      ? { status: 500 }
      : { status: 200, body: { status: 'applied' } },
  )
})

afterEach(async () => {
  if (open && !open.isCommitted && !open.isRolledBack) await open.rollback().execute()
  open = undefined
  await sink.close()
})

const CLEAN: IntegrityReport = { ok: true, violations: [], findings: [], warnings: [] }

const ACTION = {
  createdLane: 'created its missing lane row',
  unblocked: 'unblocked it: the dead letter that blocked it is gone (as if it had been skipped)',
  unparked: 'cleared a 409 park its head no longer has',
  released: (count: number) => `made ${count} event(s) held at infinity due now`,
  headDue: 'gave its head a due time (its lane stays blocked)',
  counter: (sequence: number) => `raised its sequence counter to ${sequence}`,
}
const SKIPPED_LEASED = 'a relay holds it under a live lease; run again later'
const SKIPPED_LOCKED = 'an enqueue or a claim held it for more than 5 s; run again later'

/** Runs claim-and-deliver cycles of a relay that gives up at the first failure, until one does nothing. */
async function drain(onExhausted: OnExhausted = 'skip'): Promise<void> {
  const relay = new Relay({
    db: t.db,
    endpoint: sink.url,
    retrySchedule: [],
    onExhausted,
    logger: silentLogger,
  })
  for (let cycle = 0; cycle < 20; cycle++) {
    const { delivered, failed, dead } = await relay.runOnce()
    if (delivered + failed + dead === 0) return
  }
  throw new Error('the relay never ran out of work')
}

/** The sequences the sink received, per aggregate, in arrival order. */
function received(): Record<string, number[]> {
  const sequences: Record<string, number[]> = {}
  for (const request of sink.requests) {
    const id: string = request.json.aggregate_id
    sequences[id] = [...(sequences[id] ?? []), request.json.sequence]
  }
  return sequences
}

/** The repaired lanes sorted by aggregate id, each with its kinds sorted. */
function byLane(lanes: readonly LaneRepairResult[]): LaneRepairResult[] {
  return [...lanes]
    .map((lane) => ({ ...lane, kinds: [...lane.kinds].sort() }))
    .sort((a, b) => a.aggregateId.localeCompare(b.aggregateId))
}

/** The violations as [kind, aggregate_id] pairs, sorted. */
function violated(report: IntegrityReport): [string, string][] {
  return report.violations
    .map((violation): [string, string] => [violation.kind, violation.aggregateId])
    .sort(([a, x], [b, y]) => a.localeCompare(b) || x.localeCompare(y))
}

/** `[sequence, status, at infinity]` per row of one aggregate. */
async function shape(aggregateId: string) {
  const { rows } = await sql<{ sequence: string; status: string; at_infinity: boolean }>`
    SELECT sequence, status, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE aggregate_type = 'order' AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  return rows.map((row) => [Number(row.sequence), row.status, row.at_infinity])
}

async function lane(aggregateId: string) {
  return await t.db
    .selectFrom('outbox_lane')
    .selectAll()
    .where('aggregate_type', '=', 'order')
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirst()
}

async function counter(aggregateId: string): Promise<number | undefined> {
  const row = await t.db
    .selectFrom('outbox_counter')
    .select('last_sequence')
    .where('aggregate_type', '=', 'order')
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirst()
  return row === undefined ? undefined : Number(row.last_sequence)
}

async function enqueueOne(db: Kysely<any>, aggregateId: string): Promise<number> {
  const { sequence } = await db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: {} }),
    )
  return sequence
}

/** Puts rows of one aggregate at 'infinity' (all, or from `fromSequence` on). */
async function holdAtInfinity(aggregateId: string, fromSequence = 1): Promise<void> {
  await sql`UPDATE outbox SET available_at = 'infinity'
    WHERE aggregate_id = ${aggregateId} AND sequence >= ${fromSequence}`.execute(t.db)
}

async function lease(aggregateId: string, interval: string): Promise<void> {
  await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + ${interval}::interval
    WHERE aggregate_id = ${aggregateId}`.execute(t.db)
}

/**
 * The pruned-dead-letter freeze, made by a real relay: `aggregateId` gets `count` events, its second is
 * dead-lettered under 'block' (the rows behind it wait at 'infinity'), then that dead letter is deleted.
 */
async function prunedBlocker(aggregateId: string, count: number): Promise<void> {
  await seedEvents(t.db, [aggregateId], count)
  failing.add(`${aggregateId}:2`)
  await drain('block')
  failing.clear()
  expect(await shape(aggregateId)).toEqual([
    [1, 'sent', false],
    [2, 'dead', false],
    ...Array.from({ length: count - 2 }, (_, n) => [n + 3, 'pending', true]),
  ])
  await sql`DELETE FROM outbox WHERE aggregate_id = ${aggregateId} AND status = 'dead'`.execute(t.db)
}

/** Resolves once a session of this database waits for a lock. */
async function lockWaiter(): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
    const { rows } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(t.db)
    if (Number(rows[0]!.n) > 0) return
  }
  throw new Error('no session ever waited for a lock')
}

/** Settles with 'pending' if `promise` has not settled within `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'pending'> {
  return Promise.race([promise, sleep(ms).then(() => 'pending' as const)])
}

describe('repairIntegrity', () => {
  it('changes nothing in a clean outbox', async () => {
    await seedEvents(t.db, ['a', 'b'], 2)
    const before = [await shape('a'), await shape('b')]
    expect(await repairIntegrity(t.db)).toEqual({ lanes: [], after: CLEAN })
    expect([await shape('a'), await shape('b')]).toEqual(before)
  })

  it('mends every repairable kind, lane by lane; the check after it is clean and every lane moves again', async () => {
    await seedEvents(t.db, ['no-lane', 'stuck-head', 'frozen-head', 'parked-stale', 'healthy'], 2)
    await seedEvents(t.db, ['held-tail', 'counter-low', 'counter-gone'], 3)
    await seedEvents(t.db, ['pruned'], 4)
    await seedEvents(t.db, ['parked-empty'], 1)
    // pending_without_lane
    await sql`DELETE FROM outbox_lane WHERE aggregate_id = 'no-lane'`.execute(t.db)
    // head_not_due alone: a blocked lane whose only dead letter lies above its head
    await sql`UPDATE outbox SET status = 'dead', dead_at = now() WHERE aggregate_id = 'stuck-head' AND sequence = 2`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'stuck-head' AND sequence = 1`.execute(
      t.db,
    )
    // head_not_due + row_at_infinity: an unblocked lane frozen at infinity
    await holdAtInfinity('frozen-head')
    // row_at_infinity: a row held behind a due head
    await holdAtInfinity('held-tail', 3)
    // blocked_without_dead_letter (+ head_not_due): blocked, its dead letter gone, its rows held
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id = 'pruned' AND sequence = 1`.execute(
      t.db,
    )
    await sql`DELETE FROM outbox WHERE aggregate_id = 'pruned' AND sequence = 2`.execute(t.db)
    await holdAtInfinity('pruned', 3)
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now()
      WHERE aggregate_id IN ('stuck-head', 'pruned')`.execute(t.db)
    // conflict_without_pending and stale_conflict_marker
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id = 'parked-empty'`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET attempts = 1, last_status = 500 WHERE aggregate_id = 'parked-stale' AND sequence = 1`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now(), conflict_count = 3
      WHERE aggregate_id IN ('parked-empty', 'parked-stale')`.execute(t.db)
    // counter_behind
    await sql`UPDATE outbox_counter SET last_sequence = 1 WHERE aggregate_id = 'counter-low'`.execute(t.db)
    await sql`DELETE FROM outbox_counter WHERE aggregate_id = 'counter-gone'`.execute(t.db)

    expect(violated(await checkIntegrity(t.db))).toEqual([
      ['blocked_without_dead_letter', 'pruned'],
      ['conflict_without_pending', 'parked-empty'],
      ['counter_behind', 'counter-gone'],
      ['counter_behind', 'counter-low'],
      ['head_not_due', 'frozen-head'],
      ['head_not_due', 'pruned'],
      ['head_not_due', 'stuck-head'],
      ['pending_without_lane', 'no-lane'],
      ['row_at_infinity', 'frozen-head'],
      ['row_at_infinity', 'held-tail'],
      ['stale_conflict_marker', 'parked-stale'],
    ])

    const { lanes, after } = await repairIntegrity(t.db)
    const repaired = (aggregateId: string, kinds: string[], actions: string[]) => ({
      aggregateType: 'order',
      // The counter is the aggregate's, shared by its subscriptions: its repair names none.
      ...(kinds.includes('counter_behind') ? { subscriptionId: null, subscriptionName: null } : IMPLICIT),
      aggregateId,
      kinds,
      outcome: 'repaired',
      actions,
    })
    expect(byLane(lanes)).toEqual([
      repaired('counter-gone', ['counter_behind'], [ACTION.counter(3)]),
      repaired('counter-low', ['counter_behind'], [ACTION.counter(3)]),
      repaired('frozen-head', ['head_not_due', 'row_at_infinity'], [ACTION.released(2)]),
      repaired('held-tail', ['row_at_infinity'], [ACTION.released(1)]),
      repaired('no-lane', ['pending_without_lane'], [ACTION.createdLane]),
      repaired('parked-empty', ['conflict_without_pending'], [ACTION.unparked]),
      repaired('parked-stale', ['stale_conflict_marker'], [ACTION.unparked]),
      repaired(
        'pruned',
        ['blocked_without_dead_letter', 'head_not_due'],
        [ACTION.unblocked, ACTION.released(2)],
      ),
      repaired('stuck-head', ['head_not_due'], [ACTION.headDue]),
    ])
    expect(after).toEqual(CLEAN)
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)

    // What each repair left: no row at infinity, parks cleared, counters at their highest sequence.
    expect(await lane('no-lane')).toMatchObject({ blocked_reason: null, claim_token: null })
    for (const id of ['parked-empty', 'parked-stale', 'pruned']) {
      expect(await lane(id)).toMatchObject({ blocked_reason: null, blocked_at: null, conflict_count: 0 })
    }
    // stuck-head keeps its block (only a redrive of its dead letter lifts it), with its head now due.
    expect(await lane('stuck-head')).toMatchObject({ blocked_reason: 'exhausted' })
    expect(await shape('stuck-head')).toEqual([
      [1, 'pending', false],
      [2, 'dead', false],
    ])
    expect([await counter('counter-low'), await counter('counter-gone')]).toEqual([3, 3])
    const { rows: held } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM outbox WHERE status = 'pending' AND available_at = 'infinity'`.execute(t.db)
    expect(Number(held[0]!.n)).toBe(0)

    // Every repaired lane that is not blocked delivers in sequence order.
    await drain()
    expect(received()).toEqual({
      'counter-gone': [1, 2, 3],
      'counter-low': [1, 2, 3],
      'frozen-head': [1, 2],
      healthy: [1, 2],
      'held-tail': [1, 2, 3],
      'no-lane': [1, 2],
      'parked-stale': [1, 2],
      pruned: [3, 4],
    })
    expect(await stats(t.db)).toMatchObject({ pending: 1, blocked: 1, dead: 1 })
    expect([await enqueueOne(t.db, 'counter-low'), await enqueueOne(t.db, 'counter-gone')]).toEqual([4, 4])
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
  })

  it('resumes a lane frozen by its pruned dead letter: a real relay then delivers the held events in order', async () => {
    await prunedBlocker('frozen', 3)
    expect(await enqueueOne(t.db, 'frozen')).toBe(4)
    expect(await enqueueOne(t.db, 'frozen')).toBe(5)
    expect(violated(await checkIntegrity(t.db))).toEqual([
      ['blocked_without_dead_letter', 'frozen'],
      ['head_not_due', 'frozen'],
    ])
    // Frozen for good: a relay sends nothing.
    await drain('block')
    expect(received()).toEqual({ frozen: [1, 2] })

    const { lanes, after } = await repairIntegrity(t.db)
    expect(byLane(lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'frozen',
        kinds: ['blocked_without_dead_letter', 'head_not_due'],
        outcome: 'repaired',
        actions: [ACTION.unblocked, ACTION.released(3)],
      },
    ])
    expect(after).toEqual(CLEAN)

    await drain('block')
    expect(received()).toEqual({ frozen: [1, 2, 3, 4, 5] })
    expect(await shape('frozen')).toEqual([
      [1, 'sent', false],
      [3, 'sent', false],
      [4, 'sent', false],
      [5, 'sent', false],
    ])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0, dead: 0 })
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
  })

  it('skips a lane under a live lease, says why, and still reports it; once the lease ends it is mended', async () => {
    await seedEvents(t.db, ['leased-tail', 'free-tail'], 2)
    await holdAtInfinity('leased-tail', 2)
    await holdAtInfinity('free-tail', 2)
    await lease('leased-tail', '30 seconds')
    const token = (await lane('leased-tail'))!.claim_token

    const first = await repairIntegrity(t.db)
    expect(byLane(first.lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'free-tail',
        kinds: ['row_at_infinity'],
        outcome: 'repaired',
        actions: [ACTION.released(1)],
      },
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'leased-tail',
        kinds: ['row_at_infinity'],
        outcome: 'skipped',
        reason: SKIPPED_LEASED,
      },
    ])
    expect(first.after.ok).toBe(false)
    expect(violated(first.after)).toEqual([['row_at_infinity', 'leased-tail']])
    expect(await shape('leased-tail')).toEqual([
      [1, 'pending', false],
      [2, 'pending', true],
    ])
    expect(await lane('leased-tail')).toMatchObject({ claim_token: token })

    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second' WHERE aggregate_id = 'leased-tail'`.execute(
      t.db,
    )
    const second = await repairIntegrity(t.db)
    expect(byLane(second.lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'leased-tail',
        kinds: ['row_at_infinity'],
        outcome: 'repaired',
        actions: [ACTION.released(1)],
      },
    ])
    expect(second.after).toEqual(CLEAN)
  })

  it('reports lease_too_long but never shortens the lease', async () => {
    await seedEvents(t.db, ['long-lease'], 1)
    await seedEvents(t.db, ['long-lease-tail'], 2)
    await holdAtInfinity('long-lease-tail', 2)
    await lease('long-lease', '10 minutes')
    await lease('long-lease-tail', '10 minutes')
    const leases = async () =>
      await t.db
        .selectFrom('outbox_lane')
        .select(['aggregate_id', 'claim_token', 'leased_until'])
        .orderBy('aggregate_id')
        .execute()
    const before = await leases()

    const { lanes, after } = await repairIntegrity(t.db, { maxLeaseMs: 60_000 })
    // The lane with only a long lease is not touched at all; the one with a repairable kind too is skipped, as
    // its lease is live.
    expect(byLane(lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'long-lease-tail',
        kinds: ['row_at_infinity'],
        outcome: 'skipped',
        reason: SKIPPED_LEASED,
      },
    ])
    expect(violated(after)).toEqual([
      ['lease_too_long', 'long-lease'],
      ['lease_too_long', 'long-lease-tail'],
      ['row_at_infinity', 'long-lease-tail'],
    ])
    expect(await leases()).toEqual(before)
  })

  it('waits for an open enqueue of the aggregate, so the event it wrote at infinity is released too', async () => {
    await prunedBlocker('racing', 3)
    // The enqueue reads the lane as blocked and writes its event at 'infinity'; its transaction stays open.
    open = await t.connect({ max: 1 }).startTransaction().execute()
    const { sequence } = await enqueue(open, {
      aggregateType: 'order',
      ...IMPLICIT,
      aggregateId: 'racing',
      eventType: 'order.updated',
      payload: {},
    })
    expect(sequence).toBe(4)

    const repairing = repairIntegrity(t.db)
    await lockWaiter()
    expect(await within(repairing, 200)).toBe('pending')
    await open.commit().execute()
    const { lanes, after } = await repairing

    expect(byLane(lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'racing',
        kinds: ['blocked_without_dead_letter', 'head_not_due'],
        outcome: 'repaired',
        actions: [ACTION.unblocked, ACTION.released(2)],
      },
    ])
    expect(after).toEqual(CLEAN)
    expect(await shape('racing')).toEqual([
      [1, 'sent', false],
      [3, 'pending', false],
      [4, 'pending', false],
    ])
    await drain('block')
    expect(received()).toEqual({ racing: [1, 2, 3, 4] })
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
  })

  it('skips the lane after its lock timeout when an enqueue stays open, leaving it blocked, and mends the others; a later run mends it', async () => {
    await prunedBlocker('slow', 3)
    // Another broken lane, listed after the one that waits: a skipped lane must not stop the run.
    await seedEvents(t.db, ['other-tail'], 2)
    await holdAtInfinity('other-tail', 2)
    open = await t.connect({ max: 1 }).startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      ...IMPLICIT,
      aggregateId: 'slow',
      eventType: 'order.updated',
      payload: {},
    })

    const started = performance.now()
    const first = await repairIntegrity(t.db)
    expect(performance.now() - started).toBeGreaterThanOrEqual(4900)
    expect(byLane(first.lanes)).toEqual([
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'other-tail',
        kinds: ['row_at_infinity'],
        outcome: 'repaired',
        actions: [ACTION.released(1)],
      },
      {
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'slow',
        kinds: ['blocked_without_dead_letter', 'head_not_due'],
        outcome: 'skipped',
        reason: SKIPPED_LOCKED,
      },
    ])
    expect(violated(first.after)).toEqual([
      ['blocked_without_dead_letter', 'slow'],
      ['head_not_due', 'slow'],
    ])

    // The enqueue commits: its row waits at infinity, but in a lane that is still blocked — and reported.
    await open.commit().execute()
    expect(await lane('slow')).toMatchObject({ blocked_reason: 'exhausted' })
    expect(await shape('slow')).toEqual([
      [1, 'sent', false],
      [3, 'pending', true],
      [4, 'pending', true],
    ])
    expect(violated(await checkIntegrity(t.db))).toEqual([
      ['blocked_without_dead_letter', 'slow'],
      ['head_not_due', 'slow'],
    ])

    const second = await repairIntegrity(t.db)
    expect(byLane(second.lanes)).toMatchObject([
      { aggregateId: 'slow', outcome: 'repaired', actions: [ACTION.unblocked, ACTION.released(2)] },
    ])
    expect(second.after).toEqual(CLEAN)
    expect(await shape('slow')).toEqual([
      [1, 'sent', false],
      [3, 'pending', false],
      [4, 'pending', false],
    ])
    await drain('block')
    expect(received()).toEqual({ slow: [1, 2, 3, 4], 'other-tail': [1, 2] })
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
  })
})
