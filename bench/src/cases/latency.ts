import { enqueue, migrate, Relay, silentLogger } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { runMigrations } from 'graphile-worker'
import { sql } from 'kysely'
import pg from 'pg'
import { queueOf, quietLogger, startGraphileDelivery } from '../../baselines/graphile-worker.js'
import type { BenchContext } from '../support/context.js'
import { createJsonPoster } from '../support/http-client.js'
import type { OrderReport } from '../support/order-tracker.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { median, percentile, round, seededRandom } from '../support/stats.js'
import { now, sleep, withTimeout } from '../support/timing.js'

const RATE_PER_SECOND = 200
const AGGREGATES = 1000

/**
 * Fires `fire(n)` for every event of `stream` at a steady rate without waiting for the previous one — except that
 * an aggregate's next event waits for its previous commit, as one writer per aggregate would. That keeps the
 * intended per-aggregate order identical for both systems (graphile-worker orders a queue by insert, not commit).
 */
async function steady(
  stream: readonly string[],
  perSecond: number,
  fire: (n: number) => Promise<void>,
): Promise<void> {
  const interval = 1000 / perSecond
  const t0 = now()
  const last = new Map<string, Promise<void>>()
  for (let n = 0; n < stream.length; n++) {
    const wait = t0 + n * interval - now()
    if (wait > 1) await sleep(wait)
    const key = stream[n]!
    const next = (last.get(key) ?? Promise.resolve()).then(() => fire(n))
    last.set(key, next)
  }
  await Promise.all(last.values())
}

async function createOrders(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(
      `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
       INSERT INTO orders SELECT n::text, 'created' FROM generate_series(0, ${AGGREGATES - 1}) AS n`,
    )
  } finally {
    await client.end()
  }
}

interface LatencyRun {
  readonly p50: number
  readonly p99: number
  readonly order: OrderReport
  readonly extraP50?: number
}

/**
 * Latency at a steady 200 events/s: our relay (LISTEN on) from the producer's COMMIT returning to the sink's
 * receipt, against graphile-worker's add→start (from `addJob` returning to the task starting), both fed the same
 * seeded stream of order updates over 1,000 aggregates. All times on one monotonic clock (one process).
 */
export async function latency(ctx: BenchContext): Promise<CaseResult> {
  const events = ctx.quick ? 200 : 2000
  const random = seededRandom(ctx.seed)
  const stream = Array.from({ length: events }, () => String(Math.floor(random() * AGGREGATES)))
  const ours: LatencyRun[] = []
  const theirs: LatencyRun[] = []

  const oursTemplate = await ctx.databases.create('tpl')
  const theirTemplate = await ctx.databases.create('tpl')
  try {
    {
      const db = openKysely(ctx.databases.url(oursTemplate), { max: 2 })
      await migrate(db)
      await db.destroy()
      await createOrders(ctx.databases.url(oursTemplate))
      const pool = new pg.Pool({ connectionString: ctx.databases.url(theirTemplate), max: 2 })
      pool.on('error', () => {})
      await runMigrations({ pgPool: pool, logger: quietLogger })
      await pool.end()
      await createOrders(ctx.databases.url(theirTemplate))
    }
    for (let run = 0; run < ctx.runs; run++) {
      ours.push(await runOurs(ctx, oursTemplate, stream))
      ctx.log(`  outbox relay: p50 ${ours.at(-1)!.p50.toFixed(2)} ms, p99 ${ours.at(-1)!.p99.toFixed(2)} ms`)
      theirs.push(await runGraphile(ctx, theirTemplate, stream))
      ctx.log(`  graphile-worker add→start: p50 ${theirs.at(-1)!.p50.toFixed(2)} ms`)
    }
  } finally {
    await ctx.databases.drop(oursTemplate)
    await ctx.databases.drop(theirTemplate)
  }
  const oursP50 = median(ours.map((run) => run.p50))
  const theirP50 = median(theirs.map((run) => run.p50))
  return {
    id: 'latency',
    title: `Latency at a steady ${RATE_PER_SECOND} events/s (${events} events, LISTEN on)`,
    measurements: [
      measurement(
        'outbox relay, COMMIT → sink, p50',
        'ms',
        ours.map((run) => run.p50),
        {
          order: ours.map((run) => run.order),
        },
      ),
      measurement(
        'outbox relay, COMMIT → sink, p99',
        'ms',
        ours.map((run) => run.p99),
      ),
      measurement(
        '(b) graphile-worker, add → start, p50',
        'ms',
        theirs.map((run) => run.p50),
        {
          order: theirs.map((run) => run.order),
          enforceOrder: false,
        },
      ),
      measurement(
        '(b) graphile-worker, add → start, p99',
        'ms',
        theirs.map((run) => run.p99),
      ),
      measurement(
        '(b) graphile-worker, add → sink, p50',
        'ms',
        theirs.map((run) => run.extraP50 ?? Number.NaN),
      ),
    ],
    comparisons: [
      {
        label: 'our p50 ÷ (b) add→start p50',
        ratio: round(oursP50 / theirP50),
        target: '< 1×',
        met: oursP50 < theirP50,
      },
      compare(
        'our p99 ÷ (b) add→start p99',
        median(ours.map((r) => r.p99)),
        median(theirs.map((r) => r.p99)),
      ),
    ],
    notes: [],
    seconds: 0,
  }
}

async function runOurs(ctx: BenchContext, template: string, stream: readonly string[]): Promise<LatencyRun> {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const committed = new Float64Array(stream.length)
  const receivedAt = new Float64Array(stream.length)
  const sink = await startTrackedSink({
    expected: stream.length,
    onFirstReceipt: (body, at) => {
      receivedAt[body.data.n] = at
    },
  })
  const relayDb = openKysely(url, { max: 10 })
  const producerDb = openKysely(url, { max: 8 })
  const relay = new Relay({
    db: relayDb,
    endpoint: sink.url,
    logger: silentLogger,
    listen: { connectionString: url },
  })
  try {
    await relay.start()
    await sleep(200)
    await steady(stream, RATE_PER_SECOND, async (n) => {
      const aggregateId = stream[n]!
      await producerDb.transaction().execute(async (trx) => {
        await sql`UPDATE orders SET status = ${`s${n}`} WHERE id = ${aggregateId}`.execute(trx)
        await enqueue(trx, {
          aggregateType: 'order',
          aggregateId,
          eventType: 'order.updated',
          payload: { order_id: aggregateId, n, status: `s${n}` },
        })
      })
      committed[n] = now()
    })
    await withTimeout(sink.tracker.done, 60_000, 'the latency stream to arrive')
  } finally {
    await relay.stop({ timeoutMs: 5000 })
    await relayDb.destroy()
    await producerDb.destroy()
    await sink.close()
    await ctx.databases.drop(name)
  }
  // Computed after the run: a receipt can beat the producer's COMMIT reply to the sink (a tiny negative value).
  const latencies = Array.from(receivedAt, (at, n) => at - committed[n]!)
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), order: sink.tracker.report() }
}

async function runGraphile(
  ctx: BenchContext,
  template: string,
  stream: readonly string[],
): Promise<LatencyRun> {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const added = new Float64Array(stream.length)
  const startedAt = new Float64Array(stream.length)
  const receivedAt = new Float64Array(stream.length)
  const sink = await startTrackedSink({
    expected: stream.length,
    onFirstReceipt: (body, at) => {
      receivedAt[body.data.n] = at
    },
  })
  const poster = createJsonPoster(16)
  const producerPool = new pg.Pool({ connectionString: url, max: 8 })
  producerPool.on('error', () => {})
  const sequences = new Map<string, number>()
  const worker = await startGraphileDelivery({
    url,
    endpoint: sink.url,
    poster,
    onStart: (payload) => {
      const n = (payload.data as { n: number }).n
      startedAt[n] ||= now()
    },
  })
  try {
    await sleep(200)
    await steady(stream, RATE_PER_SECOND, async (n) => {
      const aggregateId = stream[n]!
      // The sequence is known at add time: this stream adds an aggregate's jobs one after the other.
      const sequence = (sequences.get(aggregateId) ?? 0) + 1
      sequences.set(aggregateId, sequence)
      const client = await producerPool.connect()
      try {
        await client.query('BEGIN')
        await client.query('UPDATE orders SET status = $1 WHERE id = $2', [`s${n}`, aggregateId])
        await client.query(`SELECT graphile_worker.add_job('deliver', $1::json, queue_name => $2)`, [
          JSON.stringify({
            event_id: crypto.randomUUID(),
            type: 'order.updated',
            aggregate_type: 'order',
            aggregate_id: aggregateId,
            sequence,
            data: { order_id: aggregateId, n, status: `s${n}` },
          }),
          queueOf(aggregateId),
        ])
        await client.query('COMMIT')
      } finally {
        client.release()
      }
      added[n] = now()
    })
    await withTimeout(sink.tracker.done, 60_000, 'the graphile-worker stream to arrive')
  } finally {
    await worker.stop()
    await poster.close()
    await producerPool.end()
    await sink.close()
    await ctx.databases.drop(name)
  }
  const startLatencies = Array.from(startedAt, (at, n) => at - added[n]!)
  const sinkLatencies = Array.from(receivedAt, (at, n) => at - added[n]!)
  return {
    p50: percentile(startLatencies, 50),
    p99: percentile(startLatencies, 99),
    extraP50: percentile(sinkLatencies, 50),
    order: sink.tracker.report(),
  }
}
