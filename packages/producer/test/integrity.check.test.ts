import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  type CheckIntegrityOptions,
  checkIntegrity,
  DEFAULT_OVERDUE_AFTER_MS,
  enqueue,
  type IntegrityReport,
  type OnExhausted,
  OutboxError,
  Relay,
  repairIntegrity,
  silentLogger,
  stats,
} from '../src/index.js'
import { systemClock } from '../src/runtime.js'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

/** The implicit subscription, as violations, findings and repairs of a single-endpoint outbox name it. */
const IMPLICIT = { subscriptionId: '00000000-0000-0000-0000-000000000000', subscriptionName: 'default' }

/** What the sink answers per aggregate: a status for the listed sequences, 200 `applied` for everything else. */
const answers = new Map<string, { sequences: readonly number[]; status: number }>()
let sink: Sink

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
  answers.clear()
  sink = await startSink((request) => {
    const rule = answers.get(request.json.aggregate_id)
    return rule?.sequences.includes(request.json.sequence)
      ? { status: rule.status }
      : { status: 200, body: { status: 'applied' } }
  })
})

afterEach(async () => {
  await sink.close()
})

/** A relay that gives up after `retrySchedule.length + 1` attempts (one by default), for {@link drain}. */
function relay(onExhausted: OnExhausted, retrySchedule: readonly number[] = []): Relay {
  return new Relay({ db: t.db, endpoint: sink.url, retrySchedule, onExhausted, logger: silentLogger })
}

/** Runs claim-and-deliver cycles until one does nothing. */
async function drain(worker: Relay): Promise<void> {
  for (let cycle = 0; cycle < 20; cycle++) {
    const { delivered, failed, dead } = await worker.runOnce()
    if (delivered + failed + dead === 0) return
  }
  throw new Error('the relay never ran out of work')
}

/** The violations as [kind, aggregate_id] pairs (every aggregate here is of type 'order'), sorted. */
function violated(report: IntegrityReport): [string, string][] {
  for (const violation of report.violations) expect(violation.aggregateType).toBe('order')
  return report.violations
    .map((violation): [string, string] => [violation.kind, violation.aggregateId])
    .sort(([a, x], [b, y]) => a.localeCompare(b) || x.localeCompare(y))
}

/** The lane row of one aggregate. */
async function lane(aggregateId: string) {
  return await t.db
    .selectFrom('outbox_lane')
    .selectAll()
    .where('aggregate_type', '=', 'order')
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirstOrThrow()
}

async function rows(aggregateId: string) {
  const { rows } = await sql<{
    event_id: string
    sequence: string
    status: string
    at_infinity: boolean
  }>`
    SELECT event_id, sequence, status, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE aggregate_type = 'order' AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  return rows.map((row) => ({ ...row, sequence: Number(row.sequence) }))
}

/** `[sequence, status, at infinity]` per row of one aggregate. */
async function shape(aggregateId: string) {
  return (await rows(aggregateId)).map((row) => [row.sequence, row.status, row.at_infinity])
}

async function enqueueOne(aggregateId: string): Promise<number> {
  const { sequence } = await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: {} }),
    )
  return sequence
}

const CLEAN: IntegrityReport = { ok: true, violations: [], findings: [], warnings: [] }

describe('checkIntegrity on legitimate states', () => {
  it('finds nothing in an outbox with delivered, dead-lettered (skip and block), parked, retrying, leased and fresh lanes', async () => {
    // Delivered, and a lane blocked under 'block' whose later rows wait at 'infinity' behind its dead letter.
    await seedEvents(t.db, ['sent-1', 'sent-2', 'blocked'], 3)
    answers.set('blocked', { sequences: [2], status: 500 })
    await drain(relay('block'))
    expect(await enqueueOne('blocked')).toBe(4)
    expect(await shape('blocked')).toEqual([
      [1, 'sent', false],
      [2, 'dead', false],
      [3, 'pending', true],
      [4, 'pending', true],
    ])

    // A dead letter under 'skip': its lane moved on.
    await seedEvents(t.db, ['skipped'], 3)
    answers.set('skipped', { sequences: [2], status: 422 })
    await drain(relay('skip'))
    expect(await shape('skipped')).toEqual([
      [1, 'sent', false],
      [2, 'dead', false],
      [3, 'sent', false],
    ])

    // A lane under a relay's live lease, taken by the relay's own claim with the default lease.
    await seedEvents(t.db, ['leased'], 2)
    const { lanes: claimed } = await claimLanes(
      { db: t.db, schema: 'public' },
      {
        lanes: 10,
        leaseMs: 60_000,
        scanRows: 256,
        batchSize: 10,
        maxBytes: 1 << 30,
        clock: systemClock,
      },
    )
    expect(claimed.map((claim) => claim.aggregateId)).toEqual(['leased'])
    expect(await enqueueOne('leased')).toBe(3)

    // A lane parked by a 409 and a lane waiting in backoff, in one cycle; then a fresh lane no relay has seen.
    await seedEvents(t.db, ['parked', 'retrying'], 2)
    answers.set('parked', { sequences: [1], status: 409 })
    answers.set('retrying', { sequences: [1], status: 503 })
    expect(await relay('skip', [600_000]).runOnce()).toMatchObject({ delivered: 0, failed: 1, dead: 0 })
    await seedEvents(t.db, ['fresh'], 2)

    expect(await lane('blocked')).toMatchObject({ blocked_reason: 'exhausted', claim_token: null })
    expect(await lane('parked')).toMatchObject({ blocked_reason: 'conflict', conflict_count: 1 })
    expect((await rows('parked'))[0]).toMatchObject({ status: 'pending' })
    expect(await lane('leased')).toMatchObject({ blocked_reason: null, claim_token: claimed[0]!.claimToken })
    expect(await stats(t.db)).toMatchObject({ dead: 2, blocked: 2, inFlight: 1, pending: 11 })

    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
    // The relay's own lease is the longest allowed, and is not too long.
    expect(await checkIntegrity(t.db, { maxLeaseMs: 60_000 })).toEqual(CLEAN)
  })

  it('finds nothing in an empty outbox', async () => {
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
  })
})

describe('checkIntegrity reports each broken rule for the aggregate that breaks it', () => {
  it('pending_without_lane: pending events whose lane row is gone', async () => {
    await seedEvents(t.db, ['no-lane', 'healthy'], 2)
    await sql`DELETE FROM outbox_lane WHERE aggregate_id = 'no-lane'`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(report.ok).toBe(false)
    expect(violated(report)).toEqual([['pending_without_lane', 'no-lane']])
    expect(report.violations[0]!.detail).toBe('2 pending event(s) and no lane row: no claim can take them')
  })

  it('head_not_due: a blocked lane whose head waits at infinity with no dead letter below it', async () => {
    // Its only dead letter is ABOVE the head: no redrive can make the head due.
    await seedEvents(t.db, ['stuck-head', 'healthy'], 2)
    await sql`UPDATE outbox SET status = 'dead', dead_at = now(), attempts = 1, last_status = 500
      WHERE aggregate_id = 'stuck-head' AND sequence = 2`.execute(t.db)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'stuck-head' AND sequence = 1`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE aggregate_id = 'stuck-head'`.execute(
      t.db,
    )
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([['head_not_due', 'stuck-head']])
    expect(report.violations[0]!.detail).toContain('head (sequence 1) waits at infinity')
  })

  it('head_not_due and row_at_infinity: an unblocked lane whose head waits at infinity', async () => {
    await seedEvents(t.db, ['frozen-head'], 2)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'frozen-head'`.execute(t.db)
    expect(violated(await checkIntegrity(t.db))).toEqual([
      ['head_not_due', 'frozen-head'],
      ['row_at_infinity', 'frozen-head'],
    ])
  })

  it('row_at_infinity: a row behind a due head held at infinity in a lane that is not blocked', async () => {
    await seedEvents(t.db, ['held-tail', 'healthy'], 3)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'held-tail' AND sequence = 3`.execute(
      t.db,
    )
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([['row_at_infinity', 'held-tail']])
    expect(report.violations[0]!.detail).toBe('1 pending event(s) at infinity in a lane that is not blocked')
  })

  it('blocked_without_dead_letter: the pruned-dead-letter freeze', async () => {
    // A lane blocked under 'block' by its last event, whose dead letter was then deleted.
    await seedEvents(t.db, ['pruned', 'healthy'], 2)
    answers.set('pruned', { sequences: [2], status: 500 })
    await drain(relay('block'))
    expect(await shape('pruned')).toEqual([
      [1, 'sent', false],
      [2, 'dead', false],
    ])
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
    await sql`DELETE FROM outbox WHERE aggregate_id = 'pruned' AND status = 'dead'`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([['blocked_without_dead_letter', 'pruned']])
    expect(report.violations[0]!.detail).toMatch(
      /^blocked as exhausted since .+, but no dead letter is left to redrive$/,
    )
  })

  it('blocked_without_dead_letter with rows held behind it: its head is not due either', async () => {
    await seedEvents(t.db, ['pruned-held'], 3)
    answers.set('pruned-held', { sequences: [1], status: 500 })
    await drain(relay('block'))
    await sql`DELETE FROM outbox WHERE aggregate_id = 'pruned-held' AND status = 'dead'`.execute(t.db)
    expect(violated(await checkIntegrity(t.db))).toEqual([
      ['blocked_without_dead_letter', 'pruned-held'],
      ['head_not_due', 'pruned-held'],
    ])
  })

  it('conflict_without_pending: a 409 park with nothing pending', async () => {
    await seedEvents(t.db, ['parked-empty', 'healthy'], 1)
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id = 'parked-empty'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now(), conflict_count = 2
      WHERE aggregate_id = 'parked-empty'`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([['conflict_without_pending', 'parked-empty']])
    expect(report.violations[0]!.detail).toMatch(/^parked by a 409 since .+ with nothing pending$/)
  })

  it('stale_conflict_marker: a 409 park whose head was last answered 500', async () => {
    await seedEvents(t.db, ['parked-stale', 'parked-real'], 2)
    await sql`UPDATE outbox SET attempts = 1, last_status = 500, last_attempt_at = now()
      WHERE aggregate_id = 'parked-stale' AND sequence = 1`.execute(t.db)
    // A real park (head last answered 409) next to it is not reported.
    await sql`UPDATE outbox SET last_status = 409, last_attempt_at = now()
      WHERE aggregate_id = 'parked-real' AND sequence = 1`.execute(t.db)
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now(), conflict_count = 1
      WHERE aggregate_id IN ('parked-stale', 'parked-real')`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([['stale_conflict_marker', 'parked-stale']])
    expect(report.violations[0]!.detail).toBe(
      'parked by a 409, but its head (sequence 1) was last answered 500',
    )
  })

  it('lease_too_long: a lease ending later than maxLeaseMs from now', async () => {
    await seedEvents(t.db, ['long-lease', 'short-lease'], 1)
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '30 seconds'
      WHERE aggregate_id = 'long-lease'`.execute(t.db)
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '2 seconds'
      WHERE aggregate_id = 'short-lease'`.execute(t.db)
    const report = await checkIntegrity(t.db, { maxLeaseMs: 5_000 })
    expect(violated(report)).toEqual([['lease_too_long', 'long-lease']])
    expect(report.violations[0]!.detail).toMatch(/^leased until .+, more than 5000 ms from now$/)
    // Within the default (60 s), and below a tighter bound both are too long.
    expect(await checkIntegrity(t.db)).toEqual(CLEAN)
    expect(violated(await checkIntegrity(t.db, { maxLeaseMs: 1_000 }))).toEqual([
      ['lease_too_long', 'long-lease'],
      ['lease_too_long', 'short-lease'],
    ])
  })

  it('counter_behind: a counter lowered below an existing sequence, and one deleted', async () => {
    await seedEvents(t.db, ['counter-low', 'counter-gone', 'healthy'], 3)
    // Every row counts, sent ones too: a sequence is never reused.
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id = 'counter-low'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_counter SET last_sequence = 2 WHERE aggregate_id = 'counter-low'`.execute(t.db)
    await sql`DELETE FROM outbox_counter WHERE aggregate_id = 'counter-gone'`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([
      ['counter_behind', 'counter-gone'],
      ['counter_behind', 'counter-low'],
    ])
    const details = Object.fromEntries(report.violations.map((v) => [v.aggregateId, v.detail]))
    expect(details).toEqual({
      'counter-low': 'counter at 2 below an existing sequence',
      'counter-gone': 'no sequence counter',
    })
    // What the rule is for: the next enqueue of that aggregate would reuse sequence 3.
    await expect(enqueueOne('counter-low')).rejects.toMatchObject({ code: '23505' })
    expect((await rows('counter-low')).map((row) => row.sequence)).toEqual([1, 2, 3])
  })
})

describe('checkIntegrity findings', () => {
  /** Makes every pending row of `aggregateId` due (and created) `minutesAgo` minutes ago. */
  async function age(aggregateId: string, minutesAgo: number): Promise<void> {
    await sql`UPDATE outbox SET available_at = now() - ${minutesAgo} * interval '1 minute',
        created_at = now() - ${minutesAgo} * interval '1 minute'
      WHERE aggregate_id = ${aggregateId} AND status = 'pending'`.execute(t.db)
  }

  it('reports an overdue head no relay holds as a finding, not a violation; a head under a live lease is not one', async () => {
    await seedEvents(t.db, ['late', 'late-expired', 'late-leased', 'late-blocked', 'recent'], 2)
    await age('late', 60)
    await age('late-expired', 120)
    await age('late-leased', 180)
    await age('late-blocked', 240)
    // An expired lease holds nothing; a live one does.
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() - interval '1 second'
      WHERE aggregate_id = 'late-expired'`.execute(t.db)
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '30 seconds'
      WHERE aggregate_id = 'late-leased'`.execute(t.db)
    // A lane blocked by its dead letter waits for an operator: the dead letter is what to look at, not its rows —
    // even a head due long ago (an older dead letter revived alone waits, pending, for the blocker above it).
    await sql`UPDATE outbox SET status = 'dead', dead_at = now() WHERE aggregate_id = 'late-blocked' AND sequence = 2`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE aggregate_id = 'late-blocked'`.execute(
      t.db,
    )

    const report = await checkIntegrity(t.db)
    expect(report.ok).toBe(true)
    expect(report.violations).toEqual([])
    const [expired, late] = [(await rows('late-expired'))[0]!, (await rows('late'))[0]!]
    expect(report.findings.map(({ overdueSeconds: _, ...finding }) => finding)).toEqual([
      {
        kind: 'overdue_head',
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'late-expired',
        eventId: expired.event_id,
        sequence: 1,
        detail: expect.stringMatching(/^head \(sequence 1\) due for \d+ s and no relay holds it/),
      },
      {
        kind: 'overdue_head',
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'late',
        eventId: late.event_id,
        sequence: 1,
        detail: expect.stringMatching(/^head \(sequence 1\) due for \d+ s and no relay holds it/),
      },
    ])
    const [expiredSeconds, lateSeconds] = report.findings.map((finding) => finding.overdueSeconds)
    expect(expiredSeconds).toBeGreaterThanOrEqual(7200)
    expect(expiredSeconds).toBeLessThan(7260)
    expect(lateSeconds).toBeGreaterThanOrEqual(3600)
    expect(lateSeconds).toBeLessThan(3660)
    expect(report.findings[1]!.detail).toContain(`due for ${lateSeconds} s`)

    // overdueAfterMs is the threshold: past both, nothing; between them, only the older.
    expect((await checkIntegrity(t.db, { overdueAfterMs: 3 * 3_600_000 })).findings).toEqual([])
    const between = await checkIntegrity(t.db, { overdueAfterMs: 90 * 60_000 })
    expect(between.findings.map((finding) => finding.aggregateId)).toEqual(['late-expired'])
  })

  it('uses a 5-minute threshold by default', async () => {
    expect(DEFAULT_OVERDUE_AFTER_MS).toBe(300_000)
    await seedEvents(t.db, ['four-minutes', 'six-minutes'], 1)
    await age('four-minutes', 4)
    await age('six-minutes', 6)
    const report = await checkIntegrity(t.db)
    expect(report.findings.map((finding) => finding.aggregateId)).toEqual(['six-minutes'])
    expect(report.ok).toBe(true)
  })
})

describe('checkIntegrity limit', () => {
  it('bounds the lanes reported per rule, and the findings', async () => {
    const ids = (prefix: string, count: number) => Array.from({ length: count }, (_, n) => `${prefix}-${n}`)
    await seedEvents(t.db, [...ids('no-lane', 5), ...ids('parked-empty', 4), ...ids('late', 3)], 1)
    await sql`DELETE FROM outbox_lane WHERE aggregate_id LIKE 'no-lane-%'`.execute(t.db)
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id LIKE 'parked-empty-%'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now()
      WHERE aggregate_id LIKE 'parked-empty-%'`.execute(t.db)
    await sql`UPDATE outbox SET available_at = now() - interval '1 hour' WHERE aggregate_id LIKE 'late-%'`.execute(
      t.db,
    )

    const count = (report: IntegrityReport) => {
      const byKind: Record<string, number> = {}
      for (const violation of report.violations) byKind[violation.kind] = (byKind[violation.kind] ?? 0) + 1
      return { ...byKind, findings: report.findings.length }
    }
    expect(count(await checkIntegrity(t.db))).toEqual({
      pending_without_lane: 5,
      conflict_without_pending: 4,
      findings: 3,
    })
    expect(count(await checkIntegrity(t.db, { limit: 2 }))).toEqual({
      pending_without_lane: 2,
      conflict_without_pending: 2,
      findings: 2,
    })
    const one = await checkIntegrity(t.db, { limit: 1 })
    expect(count(one)).toEqual({ pending_without_lane: 1, conflict_without_pending: 1, findings: 1 })
    expect(one.ok).toBe(false)
    // The limit takes the oldest findings first.
    await sql`UPDATE outbox SET available_at = now() - interval '2 hours' WHERE aggregate_id = 'late-2'`.execute(
      t.db,
    )
    expect((await checkIntegrity(t.db, { limit: 1 })).findings[0]!.aggregateId).toBe('late-2')
  })
})

describe('options', () => {
  it.each<[string, CheckIntegrityOptions, RegExp]>([
    ['a zero maxLeaseMs', { maxLeaseMs: 0 }, /maxLeaseMs must be a positive integer, got 0/],
    ['a negative maxLeaseMs', { maxLeaseMs: -60_000 }, /maxLeaseMs must be a positive integer, got -60000/],
    ['a fractional maxLeaseMs', { maxLeaseMs: 1.5 }, /maxLeaseMs must be a positive integer/],
    ['a NaN maxLeaseMs', { maxLeaseMs: Number.NaN }, /maxLeaseMs must be a positive integer/],
    ['an infinite maxLeaseMs', { maxLeaseMs: Number.POSITIVE_INFINITY }, /maxLeaseMs must be a positive/],
    ['a zero overdueAfterMs', { overdueAfterMs: 0 }, /overdueAfterMs must be a positive integer/],
    ['a zero limit', { limit: 0 }, /limit must be a positive integer, got 0/],
    ['a bad schema', { schema: 'Bad Schema' }, /schema/],
  ])(
    'refuse %s with ERR_OUTBOX_INVALID_OPTION, and a repair with them changes nothing',
    async (_label, options, message) => {
      await seedEvents(t.db, ['held-tail'], 2)
      await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'held-tail' AND sequence = 2`.execute(
        t.db,
      )
      const check = checkIntegrity(t.db, options)
      await expect(check).rejects.toBeInstanceOf(OutboxError)
      await expect(check).rejects.toMatchObject({
        code: 'ERR_OUTBOX_INVALID_OPTION',
        message: expect.stringMatching(message),
      })
      await expect(repairIntegrity(t.db, options)).rejects.toMatchObject({
        name: 'OutboxError',
        code: 'ERR_OUTBOX_INVALID_OPTION',
      })
      expect(await shape('held-tail')).toEqual([
        [1, 'pending', false],
        [2, 'pending', true],
      ])
    },
  )
})
