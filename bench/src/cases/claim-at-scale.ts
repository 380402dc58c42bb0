import { DEFAULT_MAX_BUFFERED_BYTES, IMPLICIT_SUBSCRIPTION_ID, migrate } from '@outbox/producer'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
// A micro-benchmark of the claim itself (claim and first read, one function call), below the public API (the
// claim is not exported; runOnce would add HTTP and marks to what is timed).
import { systemClock } from '../../../packages/producer/src/runtime.js'
import { claimLanes } from '../../../packages/producer/src/sql/claim-lanes.js'
import type { BenchContext } from '../support/context.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { median } from '../support/stats.js'
import { now } from '../support/timing.js'

const AGGREGATES = 1000
const BACKOFF_LANES = 10_000
/** Lanes a 128-lane relay holds while it claims: 128 in delivery and 128 claimed ahead. */
const LEASED_LANES = 256
/** What the relay asks for at its default concurrency: 16 lanes, a scan window of max(16 × 8, 256) rows. */
const LANES = 16
const SCAN_ROWS = 256
/** The relay's default batch size: each claimed lane's first rows are read in the same call. */
const BATCH = 200

type Scenario = 'pending alone' | 'with sent rows' | 'with backoff lanes' | 'with leased lanes'

function scenarioLabel(scenario: Scenario, sentRows: number): string {
  switch (scenario) {
    case 'pending alone':
      return `${AGGREGATES} pending alone`
    case 'with sent rows':
      return `+ ${sentRows.toLocaleString('en')} sent rows`
    case 'with backoff lanes':
      return `+ ${BACKOFF_LANES.toLocaleString('en')} lanes in backoff`
    case 'with leased lanes':
      return `+ ${LEASED_LANES} lanes leased (${2 * LEASED_LANES} due rows)`
  }
}

/** The lane and counter rows of aggregates `0 … count - 1` of one type, as enqueue would have left them. */
async function insertLanes(
  db: Kysely<any>,
  type: string,
  count: number,
  lastSequence: number,
): Promise<void> {
  await sql`
    INSERT INTO outbox_lane (aggregate_type, aggregate_id)
    SELECT ${type}, a::text FROM generate_series(0, ${count - 1}::int) AS a`.execute(db)
  await sql`
    INSERT INTO outbox_counter (aggregate_type, aggregate_id, last_sequence)
    SELECT ${type}, a::text, ${lastSequence}::bigint FROM generate_series(0, ${count - 1}::int) AS a`.execute(
    db,
  )
}

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
    await insertLanes(db, 'order', AGGREGATES, perAggregate + 1)
    if (scenario === 'with backoff lanes') {
      // Lanes whose head failed once and waits an hour in backoff.
      await sql`
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, attempts,
                            available_at, last_attempt_at, last_status, last_error)
        SELECT gen_random_uuid(), 'account', b::text, 1, 'account.updated', jsonb_build_object('b', b), 1,
               now() + interval '1 hour', now(), 500, 'HTTP 500'
        FROM generate_series(0, ${BACKOFF_LANES - 1}::int) AS b`.execute(db)
      await insertLanes(db, 'account', BACKOFF_LANES, 1)
    }
    if (scenario === 'with leased lanes') {
      // Lanes in flight at another relay, two due rows each. Their rows are the oldest due (they are being
      // delivered), so every claim's due scan meets them first and must skip each one: the cost this scenario shows.
      await sql`
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, available_at)
        SELECT gen_random_uuid(), 'busy', (n / 2)::text, n % 2 + 1, 'busy.updated', jsonb_build_object('n', n),
               now() - interval '1 minute'
        FROM generate_series(0, ${2 * LEASED_LANES - 1}::int) AS n`.execute(db)
      await insertLanes(db, 'busy', LEASED_LANES, 2)
    }
    await sql`VACUUM ANALYZE`.execute(db)
    if (scenario === 'with leased lanes') {
      // Leased after the statistics were taken, as in production, where leases come and go between analyzes:
      // 0004's claim planned its busy-lane check from such statistics (see migration 0006).
      await sql`
        UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
        WHERE aggregate_type = 'busy'`.execute(db)
    }
  } finally {
    await db.destroy()
  }
}

/** Claims 16 lanes and hands them straight back, `count` times; returns each claim's latency in ms. */
async function claimLoop(db: Kysely<any>, count: number): Promise<number[]> {
  const latencies: number[] = []
  for (let i = 0; i < count; i++) {
    const t0 = now()
    const { lanes: rows } = await claimLanes(
      { db, schema: 'public' },
      {
        lanes: LANES,
        leaseMs: 60_000,
        scanRows: SCAN_ROWS,
        batchSize: BATCH,
        maxBytes: DEFAULT_MAX_BUFFERED_BYTES,
        clock: systemClock,
      },
    )
    latencies.push(now() - t0)
    if (rows.length !== LANES) throw new Error(`claimed ${rows.length} lanes, expected ${LANES}`)
    const tokens = rows.map((row) => row.claimToken)
    await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL WHERE claim_token = ANY(${tokens}::uuid[])`.execute(
      db,
    )
  }
  return latencies
}

/** One node of a JSON plan, as auto_explain logs it. */
interface PlanNode {
  'Node Type': string
  'Relation Name'?: string
  'Index Name'?: string
  'Actual Rows'?: number
  'Actual Loops'?: number
  'Actual Total Time'?: number
  'Shared Hit Blocks'?: number
  Plans?: PlanNode[]
}

/** A plan as indented lines: node, relation or index, rows × loops, time and buffers. */
function renderPlan(node: PlanNode, depth = 0): string[] {
  const target = node['Index Name'] ?? node['Relation Name']
  const line =
    `${'  '.repeat(depth)}${depth > 0 ? '-> ' : ''}${node['Node Type']}${target ? ` on ${target}` : ''}` +
    ` (rows=${node['Actual Rows']} loops=${node['Actual Loops']} time=${node['Actual Total Time']} ms` +
    ` hit=${node['Shared Hit Blocks']})`
  return [line, ...(node.Plans ?? []).flatMap((child) => renderPlan(child, depth + 1))]
}

/**
 * The plans of one claim (rolled back), for the record: the claim runs inside the schema's function, so its
 * statements' plans come from auto_explain (nested statements, analyzed, JSON) as LOG messages sent to this
 * client. Returns the duration and plan of the claiming statement (the one that locks lane rows).
 */
async function explainClaim(url: string): Promise<{ executionMs: number; plan: string[] }> {
  const client = new pg.Client({ connectionString: url })
  const logged: string[] = []
  client.on('notice', (notice) => {
    if (notice.message) logged.push(notice.message)
  })
  await client.connect()
  try {
    await client.query(`LOAD 'auto_explain'`)
    await client.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
      SET auto_explain.log_buffers = on; SET auto_explain.log_nested_statements = on;
      SET auto_explain.log_format = json; SET client_min_messages = log`)
    await client.query('BEGIN')
    // The relay's own call (migration 0017's claim of one subscription, the implicit one): the older overloads
    // refuse with OB001 since 0008, so a claim the relay does not make would plan nothing.
    await client.query(
      'SELECT * FROM outbox_claim_single_subscription_lanes($1::uuid, $2::integer, $3, $4, $5, $6, $7)',
      [IMPLICIT_SUBSCRIPTION_ID, LANES, LANES, 60_000, SCAN_ROWS, BATCH, DEFAULT_MAX_BUFFERED_BYTES],
    )
    await client.query('ROLLBACK')
    const claim = logged.find((message) => message.includes('"LockRows"'))
    if (!claim) throw new Error(`auto_explain logged no claim plan (${logged.length} messages)`)
    const { Plan } = JSON.parse(claim.slice(claim.indexOf('{'))) as { Plan: PlanNode }
    return {
      executionMs: Number(claim.match(/duration: ([\d.]+) ms/)?.[1] ?? Number.NaN),
      plan: renderPlan(Plan),
    }
  } finally {
    await client.end()
  }
}

/**
 * Claim at scale: the latency of one claim (16 lanes) with 1,000 pending lanes alone, with 1,000,000 sent rows
 * behind them, and with 10,000 more lanes waiting in backoff. The partial indexes should make both extras
 * invisible to the claim. Reported besides: with 256 lanes leased elsewhere, whose due rows every claim skips.
 */
export async function claimAtScale(ctx: BenchContext): Promise<CaseResult> {
  const sentRows = ctx.quick ? 20_000 : 1_000_000
  const claims = ctx.quick ? 50 : 300
  // Cheap enough for three runs even in quick mode.
  const runCount = Math.max(3, ctx.runs)
  const scenarios: Scenario[] = ['pending alone', 'with sent rows', 'with backoff lanes', 'with leased lanes']
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
      measurement(scenarioLabel(scenario, sentRows), 'ms', runs.get(scenario)!, {
        detail: { explainExecutionMs: plans[scenario]?.executionMs, plan: plans[scenario]?.plan },
      }),
    ),
    comparisons: [
      compare('with sent rows ÷ alone', median(runs.get('with sent rows')!), base, { max: 1.2 }),
      compare('with backoff lanes ÷ alone', median(runs.get('with backoff lanes')!), base, { max: 1.2 }),
      compare('with leased lanes ÷ alone', median(runs.get('with leased lanes')!), base),
    ],
    notes: [`median of ${claims} claims per run (each claim handed back at once); plans in latest.json`],
    seconds: 0,
  }
}
