import { enqueue, migrate, prune, Relay, silentLogger } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import type { BenchContext } from '../support/context.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, type Comparison, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { median, percentile, round, seededRandom } from '../support/stats.js'
import { now, sleep, withTimeout } from '../support/timing.js'

const AGGREGATES = 1000
const BATCH_SIZE = 5000
const PAUSE_MS = 50

async function seed(url: string, sentRows: number): Promise<void> {
  const db = openKysely(url, { max: 1 })
  try {
    await migrate(db)
    const perAggregate = sentRows / AGGREGATES
    await sql`
      INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, status, attempts,
                          created_at, available_at, sent_at, last_status)
      SELECT gen_random_uuid(), 'order', (n % ${AGGREGATES})::text, n / ${AGGREGATES} + 1, 'order.updated',
             jsonb_build_object('n', n), 'sent', 1, now() - interval '40 days', now() - interval '40 days',
             now() - interval '40 days', 200
      FROM generate_series(0, ${sentRows - 1}::int) AS n`.execute(db)
    await sql`
      INSERT INTO outbox_lane (aggregate_type, aggregate_id)
      SELECT 'order', a::text FROM generate_series(0, ${AGGREGATES - 1}::int) AS a`.execute(db)
    await sql`
      INSERT INTO outbox_counter (aggregate_type, aggregate_id, last_sequence)
      SELECT 'order', a::text, ${perAggregate}::bigint FROM generate_series(0, ${AGGREGATES - 1}::int) AS a`.execute(
      db,
    )
    await sql`VACUUM ANALYZE`.execute(db)
  } finally {
    await db.destroy()
  }
}

interface Window {
  readonly offered: number
  readonly delivered: number
  readonly p99: number
}

interface PruneRun {
  readonly before: Window
  readonly during: Window
  readonly pruneSeconds: number
  readonly removed: number
  readonly order: OrderReport
}

/**
 * Prune under load: the relay serves a steady offered load (new order events, LISTEN on) while `prune` deletes
 * the old sent rows in paced batches. Compared with the window just before the prune in the same run: events
 * delivered ÷ events offered in each window, and the p99 of COMMIT → sink.
 */
export async function pruneUnderLoad(ctx: BenchContext): Promise<CaseResult> {
  const sentRows = ctx.quick ? 10_000 : 300_000
  // Below what 8 producer connections can commit on this machine even when it is busy (the enqueue case measures
  // ≈ 250 tx/s at its worst), so the load is really offered.
  const rate = ctx.quick ? 150 : 200
  const beforeMs = ctx.quick ? 1000 : 5000
  const template = await ctx.databases.create(
    'tpl',
    await ctx.databases.schemaTemplate('outbox', installOutbox),
  )
  const runs: PruneRun[] = []
  try {
    const t0 = now()
    await seed(ctx.databases.url(template), sentRows)
    ctx.log(`  seeded ${sentRows} sent rows in ${((now() - t0) / 1000).toFixed(1)} s`)
    for (let run = 0; run < ctx.runs; run++) {
      runs.push(await runOnce(ctx, template, rate, beforeMs, run))
      const last = runs.at(-1)!
      ctx.log(
        `  before: ${last.before.delivered}/${last.before.offered}, during prune (${last.pruneSeconds.toFixed(1)} s, ${last.removed} rows): ${last.during.delivered}/${last.during.offered}`,
      )
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const share = (w: Window) => w.delivered / Math.max(1, w.offered)
  const during = median(runs.map((run) => share(run.during)))
  const comparisons: Comparison[] = [
    {
      label: 'delivered ÷ offered during prune',
      ratio: round(during),
      target: '≥ 0.95×',
      met: during >= 0.95,
    },
    {
      label: 'p99 during ÷ before prune',
      ratio: round(median(runs.map((run) => run.during.p99 / run.before.p99))),
      target: 'reported',
      met: null,
    },
  ]
  return {
    id: 'prune-under-load',
    title: `Prune under load: ${sentRows.toLocaleString('en')} old sent rows pruned (batch ${BATCH_SIZE}, pause ${PAUSE_MS} ms) while ${rate} events/s are offered`,
    measurements: [
      measurement(
        'delivered ÷ offered, before prune',
        'ratio',
        runs.map((run) => share(run.before)),
        {
          order: runs.map((run) => run.order),
        },
      ),
      measurement(
        'delivered ÷ offered, during prune',
        'ratio',
        runs.map((run) => share(run.during)),
      ),
      measurement(
        'COMMIT → sink p99, before prune',
        'ms',
        runs.map((run) => run.before.p99),
      ),
      measurement(
        'COMMIT → sink p99, during prune',
        'ms',
        runs.map((run) => run.during.p99),
      ),
      measurement(
        'prune duration',
        's',
        runs.map((run) => run.pruneSeconds),
        {
          detail: { removed: runs.map((run) => run.removed) },
        },
      ),
    ],
    comparisons,
    notes: [],
    seconds: 0,
  }
}

async function runOnce(
  ctx: BenchContext,
  template: string,
  rate: number,
  beforeMs: number,
  run: number,
): Promise<PruneRun> {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const committed = new Map<number, number>()
  const received: { n: number; at: number }[] = []
  const sink = await startTrackedSink({
    expected: Number.POSITIVE_INFINITY,
    onFirstReceipt: (body, at) => received.push({ n: body.data.n, at }),
  })
  const relayDb = openKysely(url, { max: 10 })
  const producerDb = openKysely(url, { max: 8 })
  const pruneDb = openKysely(url, { max: 1 })
  const relay = new Relay({
    db: relayDb,
    endpoint: sink.url,
    logger: silentLogger,
    listen: { connectionString: url },
  })
  const random = seededRandom(ctx.seed + run)
  let producing = true
  const chains = new Map<string, Promise<void>>()
  const produce = async () => {
    const t0 = now()
    for (let n = 0; producing && n < 1_000_000; n++) {
      const wait = t0 + (n * 1000) / rate - now()
      if (wait > 1) await sleep(wait)
      const aggregateId = String(Math.floor(random() * AGGREGATES))
      const next = (chains.get(aggregateId) ?? Promise.resolve()).then(async () => {
        await producerDb.transaction().execute((trx) =>
          enqueue(trx, {
            aggregateType: 'order',
            aggregateId,
            eventType: 'order.updated',
            payload: { order_id: aggregateId, n },
          }),
        )
        committed.set(n, now())
      })
      chains.set(aggregateId, next)
    }
    await Promise.all(chains.values())
  }
  let production: Promise<void> | undefined
  try {
    await relay.start()
    production = produce()
    await sleep(1000 + beforeMs)
    const p0 = now()
    const result = await prune(pruneDb, {
      retention: '30d',
      batchSize: BATCH_SIZE,
      pauseMs: PAUSE_MS,
      maxBatches: 10_000,
    })
    const p1 = now()
    producing = false
    await withTimeout(production, 60_000, 'the producer to finish')
    const total = committed.size
    await withTimeout(
      (async () => {
        while (sink.tracker.received < total) await sleep(20)
      })(),
      60_000,
      'the relay to deliver the offered load',
    )
    const window = (from: number, to: number): Window => {
      const offered = [...committed.values()].filter((at) => at >= from && at < to).length
      const delivered = received.filter((r) => r.at >= from && r.at < to).length
      const latencies = received
        .filter((r) => {
          const at = committed.get(r.n)
          return at !== undefined && at >= from && at < to
        })
        .map((r) => r.at - committed.get(r.n)!)
      return { offered, delivered, p99: percentile(latencies, 99) }
    }
    return {
      before: window(p0 - beforeMs, p0),
      during: window(p0, p1),
      pruneSeconds: (p1 - p0) / 1000,
      removed: result.removed,
      order: { ...sink.tracker.report(), expected: total, complete: sink.tracker.received >= total },
    }
  } finally {
    producing = false
    await production?.catch(() => {})
    await relay.stop({ timeoutMs: 5000 })
    await relayDb.destroy()
    await producerDb.destroy()
    await pruneDb.destroy()
    await sink.close()
    await ctx.databases.drop(name)
  }
}
