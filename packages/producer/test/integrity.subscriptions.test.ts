import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { checkIntegrity, type IntegrityReport, repairIntegrity } from '../src/index.js'
import { buildCli, cliEnv, runCli } from './cli-process.js'
import { seedEvents, storeSubscriptions } from './support.js'

const t = useTestDatabase()

let ids: Record<string, string> = {}

/** One subscription's rows of one aggregate and its lane row: the state a repair must leave alone or mend. */
async function view(subscriptionId: string, aggregateId: string) {
  const { rows } = await sql<{ sequence: string; status: string; at_infinity: boolean }>`
    SELECT sequence, status, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE subscription_id = ${subscriptionId}::uuid AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(
    t.db,
  )
  const { rows: lanes } = await sql<{ blocked_reason: string | null }>`
    SELECT blocked_reason FROM outbox_lane
    WHERE subscription_id = ${subscriptionId}::uuid AND aggregate_id = ${aggregateId}`.execute(t.db)
  return {
    rows: rows.map((row) => [Number(row.sequence), row.status, row.at_infinity]),
    lane: lanes.map((lane) => lane.blocked_reason),
  }
}

function lane(subscriptionId: string, aggregateId: string) {
  return sql`subscription_id = ${subscriptionId}::uuid AND aggregate_id = ${aggregateId}`
}

/** The violations as [kind, subscription name, aggregate id], sorted. */
function violated(report: IntegrityReport) {
  return report.violations
    .map((v) => [v.kind, v.subscriptionName, v.aggregateId])
    .sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)))
}

beforeAll(async () => {
  buildCli()
  ids = await storeSubscriptions(t.db, { a: {}, b: {} })
})

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
  await sql`DELETE FROM outbox_subscription WHERE name NOT IN ('default', 'a', 'b')`.execute(t.db)
  await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE name IN ('a', 'b')`.execute(t.db)
})

describe('checkIntegrity and repairIntegrity per subscription', () => {
  it("finds a violation planted in subscription a's lane and mends it from a's rows alone, leaving b's lane of the same aggregate as it was", async () => {
    await seedEvents(t.db, ['x'], 3)
    // b: legitimately blocked under 'block' — x#1 dead there, x#2 and x#3 held at infinity behind it.
    await sql`UPDATE outbox SET status = 'dead', dead_at = now(), attempts = 8 WHERE ${lane(ids.b!, 'x')} AND sequence = 1`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE ${lane(ids.b!, 'x')} AND status = 'pending'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE ${lane(ids.b!, 'x')}`.execute(
      t.db,
    )
    // a: blocked the same way, but with no dead letter of its own (pruned): frozen for good. b's dead row of the
    // same aggregate must not excuse it.
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE ${lane(ids.a!, 'x')}`.execute(t.db)
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE ${lane(ids.a!, 'x')}`.execute(
      t.db,
    )
    const bBefore = await view(ids.b!, 'x')
    expect(bBefore).toEqual({
      rows: [
        [1, 'dead', false],
        [2, 'pending', true],
        [3, 'pending', true],
      ],
      lane: ['exhausted'],
    })

    const report = await checkIntegrity(t.db)
    expect(violated(report)).toEqual([
      ['blocked_without_dead_letter', 'a', 'x'],
      ['head_not_due', 'a', 'x'],
    ])
    expect(report.violations.every((v) => v.subscriptionId === ids.a)).toBe(true)

    const { lanes, after } = await repairIntegrity(t.db)
    expect(lanes).toEqual([
      {
        outcome: 'repaired',
        actions: [
          'unblocked it: the dead letter that blocked it is gone (as if it had been skipped)',
          'made 3 event(s) held at infinity due now',
        ],
        subscriptionId: ids.a,
        subscriptionName: 'a',
        aggregateType: 'order',
        aggregateId: 'x',
        kinds: expect.arrayContaining(['blocked_without_dead_letter', 'head_not_due']),
      },
    ])
    expect(after.ok).toBe(true)
    expect(await view(ids.a!, 'x')).toEqual({
      rows: [
        [1, 'pending', false],
        [2, 'pending', false],
        [3, 'pending', false],
      ],
      lane: [null],
    })
    expect(await view(ids.b!, 'x')).toEqual(bBefore)
  })

  it('reports a counter behind once per aggregate (it is shared by the subscriptions), with no subscription', async () => {
    await seedEvents(t.db, ['x'], 3)
    await sql`UPDATE outbox_counter SET last_sequence = 1 WHERE aggregate_id = 'x'`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(report.violations).toEqual([
      {
        kind: 'counter_behind',
        subscriptionId: null,
        subscriptionName: null,
        aggregateType: 'order',
        aggregateId: 'x',
        detail: 'counter at 1 below an existing sequence',
      },
    ])
    const { lanes, after } = await repairIntegrity(t.db)
    expect(lanes).toMatchObject([{ subscriptionId: null, actions: ['raised its sequence counter to 3'] }])
    expect(after.ok).toBe(true)
  })

  it('reports the pending events of a subscription that no longer exists, and the repair deletes them and their lane alone', async () => {
    const [c] = Object.values(await storeSubscriptions(t.db, { c: {} }))
    await seedEvents(t.db, ['w'], 2)
    // Deleted without its rows: there is no foreign key to stop it.
    await sql`DELETE FROM outbox_subscription WHERE id = ${c}::uuid`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(report.violations).toEqual([
      {
        kind: 'orphaned_subscription',
        subscriptionId: c,
        subscriptionName: null,
        aggregateType: 'order',
        aggregateId: 'w',
        detail: `2 pending event(s) of subscription ${c}, which does not exist: no relay serves them`,
      },
    ])
    const { lanes, after } = await repairIntegrity(t.db)
    expect(lanes).toMatchObject([
      {
        subscriptionId: c,
        outcome: 'repaired',
        actions: [`deleted its 2 event(s) and its lane: subscription ${c} does not exist`],
      },
    ])
    expect(after.ok).toBe(true)
    expect(await view(c!, 'w')).toEqual({ rows: [], lane: [] })
    const kept = {
      rows: [
        [1, 'pending', false],
        [2, 'pending', false],
      ],
      lane: [null],
    }
    expect(await view(ids.a!, 'w')).toEqual(kept)
    expect(await view(ids.b!, 'w')).toEqual(kept)
  })

  it('warns about a disabled subscription holding events, and does not report its heads as overdue', async () => {
    await seedEvents(t.db, ['late'], 1)
    await sql`UPDATE outbox SET available_at = now() - interval '2 hours' WHERE aggregate_id = 'late'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_subscription SET state = 'disabled' WHERE id = ${ids.b}::uuid`.execute(t.db)
    const report = await checkIntegrity(t.db)
    expect(report.ok).toBe(true)
    expect(report.warnings).toEqual([
      'disabled subscription b holds 1 pending event; they pin pruning: enable or delete it',
    ])
    expect(report.findings.map((f) => [f.kind, f.subscriptionName, f.aggregateId])).toEqual([
      ['overdue_head', 'a', 'late'],
    ])

    const doctor = await runCli(['doctor'], cliEnv({ DATABASE_URL: t.url }))
    expect(doctor.code, doctor.stderr).toBe(0)
    expect(doctor.stdout).toMatch(/^ {2}overdue_head\s+order:late \(subscription a\)\s+head \(sequence 1\)/m)
    expect(doctor.stderr).toBe(
      'warning: disabled subscription b holds 1 pending event; they pin pruning: enable or delete it\n',
    )
  })
})
