import { migrate } from '@outbox/producer'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
// A micro-benchmark of the claim statement itself, below the public API (the claim is not exported; runOnce
// would add HTTP and marks to what is timed).
import { claimLanes } from '../../../packages/producer/src/sql/claim-lanes.js'
import type { BenchContext } from '../support/context.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { median } from '../support/stats.js'
import { now } from '../support/timing.js'

const AGGREGATES = 1000
const BACKOFF_LANES = 10_000
/** What the relay asks for at its default concurrency (16 lanes, scanning 64 rows per lane wanted). */
const LANES = 16
const SCAN_ROWS = 1024

type Scenario = 'pending alone' | 'with sent rows' | 'with backoff lanes'

async function seed(url: string, scenario: Scenario, sentRows: number): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
  try {
    await migrate(db)
    const perAggregate = scenario === 'with sent rows' ? sentRows / AGGREGATES : 0
    if (perAggregate > 0) {
      // Sent history: sequences 1..k of every aggregate, one INSERT … SELECT generate_series.
      await sql`
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, status, attempts,
                            created_at, available_at, sent_at, last_status)
        SELECT gen_random_uuid(), 'order', (n % ${AGGREGATES})::text, n / ${AGGREGATES} + 1, 'order.updated',
               jsonb_build_object('n', n), 'sent', 1, now() - interval '1 day', now() - interval '1 day',
               now() - interval '1 day', 200
        FROM generate_series(0, ${sentRows - 1}::int) AS n`.execute(db)
    }
    // One pending head per aggregate, due now.
    await sql`
      INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload)
      SELECT gen_random_uuid(), 'order', a::text, ${perAggregate + 1}::bigint, 'order.updated', jsonb_build_object('a', a)
      FROM generate_series(0, ${AGGREGATES - 1}::int) AS a`.execute(db)
    await sql`
      INSERT INTO outbox_lane (aggregate_type, aggregate_id)
      SELECT 'order', a::text FROM generate_series(0, ${AGGREGATES - 1}::int) AS a`.execute(db)
    await sql`
      INSERT INTO outbox_counter (aggregate_type, aggregate_id, last_sequence)
      SELECT 'order', a::text, ${perAggregate + 1}::bigint FROM generate_series(0, ${AGGREGATES - 1}::int) AS a`.execute(
      db,
    )
    if (scenario === 'with backoff lanes') {
      // Lanes whose head failed once and waits an hour in backoff.
      await sql`
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, attempts,
                            available_at, last_attempt_at, last_status, last_error)
        SELECT gen_random_uuid(), 'account', b::text, 1, 'account.updated', jsonb_build_object('b', b), 1,
               now() + interval '1 hour', now(), 500, 'HTTP 500'
        FROM generate_series(0, ${BACKOFF_LANES - 1}::int) AS b`.execute(db)
      await sql`
        INSERT INTO outbox_lane (aggregate_type, aggregate_id)
        SELECT 'account', b::text FROM generate_series(0, ${BACKOFF_LANES - 1}::int) AS b`.execute(db)
      await sql`
        INSERT INTO outbox_counter (aggregate_type, aggregate_id, last_sequence)
        SELECT 'account', b::text, 1 FROM generate_series(0, ${BACKOFF_LANES - 1}::int) AS b`.execute(db)
    }
    await sql`VACUUM ANALYZE`.execute(db)
  } finally {
    await db.destroy()
  }
}

/** Claims 16 lanes and hands them straight back, `count` times; returns each claim's latency in ms. */
async function claimLoop(db: Kysely<any>, count: number): Promise<number[]> {
  const latencies: number[] = []
  for (let i = 0; i < count; i++) {
    const t0 = now()
    const rows = await claimLanes(db, 'public', LANES, 60_000, SCAN_ROWS)
    latencies.push(now() - t0)
    if (rows.length !== LANES) throw new Error(`claimed ${rows.length} lanes, expected ${LANES}`)
    const tokens = rows.map((row) => row.claim_token)
    await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL WHERE claim_token = ANY(${tokens}::uuid[])`.execute(
      db,
    )
  }
  return latencies
}

/** EXPLAIN ANALYZE of one claim (rolled back), for the record: execution time and the plan's top lines. */
async function explainClaim(url: string): Promise<{ executionMs: number; plan: string[] }> {
  let captured: { sql: string; parameters: readonly unknown[] } | undefined
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  const db = new Kysely<any>({
    dialect: new PostgresDialect({ pool }),
    log: (event) => {
      if (event.query.sql.includes('FOR UPDATE OF l SKIP LOCKED')) {
        captured ??= { sql: event.query.sql, parameters: event.query.parameters }
      }
    },
  })
  try {
    await db.transaction().execute(async (trx) => {
      await claimLanes(trx, 'public', LANES, 60_000, SCAN_ROWS)
      throw new Error('rollback')
    })
  } catch {
    // rolled back on purpose
  }
  await db.destroy()
  if (!captured) throw new Error('no claim statement captured')
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query('BEGIN')
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (ANALYZE, BUFFERS) ${captured.sql}`,
      captured.parameters as unknown[],
    )
    await client.query('ROLLBACK')
    const plan = rows.map((row) => row['QUERY PLAN'])
    const execution = plan.find((line) => line.startsWith('Execution Time'))
    return { executionMs: Number(execution?.match(/[\d.]+/)?.[0] ?? Number.NaN), plan }
  } finally {
    await client.end()
  }
}

/**
 * Claim at scale: the latency of one claim (16 lanes) with 1,000 pending lanes alone, with 1,000,000 sent rows
 * behind them, and with 10,000 more lanes waiting in backoff. The partial indexes should make both extras
 * invisible to the claim.
 */
export async function claimAtScale(ctx: BenchContext): Promise<CaseResult> {
  const sentRows = ctx.quick ? 20_000 : 1_000_000
  const claims = ctx.quick ? 50 : 300
  // Cheap enough for three runs even in quick mode.
  const runCount = Math.max(3, ctx.runs)
  const scenarios: Scenario[] = ['pending alone', 'with sent rows', 'with backoff lanes']
  const names = new Map<Scenario, string>()
  const runs = new Map<Scenario, number[]>()
  const plans: Record<string, { executionMs: number; plan: string[] }> = {}
  try {
    for (const scenario of scenarios) {
      const name = await ctx.databases.create(
        'claim',
        await ctx.databases.schemaTemplate('outbox', installOutbox),
      )
      names.set(scenario, name)
      const t0 = now()
      await seed(ctx.databases.url(name), scenario, sentRows)
      ctx.log(`  seeded ${scenario} in ${((now() - t0) / 1000).toFixed(1)} s`)
      runs.set(scenario, [])
    }
    const pools = new Map(
      scenarios.map((scenario) => {
        const pool = new pg.Pool({ connectionString: ctx.databases.url(names.get(scenario)!), max: 1 })
        return [scenario, new Kysely<any>({ dialect: new PostgresDialect({ pool }) })] as const
      }),
    )
    try {
      for (const db of pools.values()) await claimLoop(db, 20)
      for (let run = 0; run < runCount; run++) {
        for (const scenario of scenarios) {
          const latencies = await claimLoop(pools.get(scenario)!, claims)
          runs.get(scenario)!.push(median(latencies))
          ctx.log(`  ${scenario}: median claim ${median(latencies).toFixed(3)} ms`)
        }
      }
    } finally {
      for (const db of pools.values()) await db.destroy()
    }
    for (const scenario of scenarios)
      plans[scenario] = await explainClaim(ctx.databases.url(names.get(scenario)!))
  } finally {
    for (const name of names.values()) await ctx.databases.drop(name)
  }
  const base = median(runs.get('pending alone')!)
  return {
    id: 'claim-at-scale',
    title: `Claim at scale: one claim of ${LANES} lanes, ${AGGREGATES} pending lanes`,
    measurements: scenarios.map((scenario) =>
      measurement(
        scenario === 'with sent rows'
          ? `+ ${sentRows.toLocaleString('en')} sent rows`
          : scenario === 'with backoff lanes'
            ? `+ ${BACKOFF_LANES.toLocaleString('en')} lanes in backoff`
            : `${AGGREGATES} pending alone`,
        'ms',
        runs.get(scenario)!,
        { detail: { explainExecutionMs: plans[scenario]?.executionMs, plan: plans[scenario]?.plan } },
      ),
    ),
    comparisons: [
      compare('with sent rows ÷ alone', median(runs.get('with sent rows')!), base, { max: 1.2 }),
      compare('with backoff lanes ÷ alone', median(runs.get('with backoff lanes')!), base, { max: 1.2 }),
    ],
    notes: [`median of ${claims} claims per run (each claim handed back at once); plans in latest.json`],
    seconds: 0,
  }
}
