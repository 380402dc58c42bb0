import { monitorEventLoopDelay } from 'node:perf_hooks'
import {
  createSubscription,
  disableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { BenchContext } from '../support/context.js'
import { seedDeliveredHistory } from '../support/history.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { startTrackedSink, type TrackedSink } from '../support/sink.js'
import { median, percentile, round, seededRandom } from '../support/stats.js'
import { enqueueSteadily, latencies } from '../support/steady-stream.js'
import { now, sleep } from '../support/timing.js'

/** The set-up the issue states: concurrency 32, the healthy sink answering after 20 ms. */
export const ISOLATION_CONCURRENCY = 32
export const HEALTHY_DELAY_MS = 20
const SLOW_DELAY_MS = 2000
/** Offered load: an eighth of the healthy subscription's capacity alone (32 ÷ 20 ms = 1,600/s). */
const RATE_PER_SECOND = 200
const AGGREGATES = 1000

/** One run of one set-up, as the healthy subscription saw it. */
interface IsolationRun {
  /** Deliveries per second: events ÷ (stream start → last first receipt). */
  readonly throughput: number
  readonly p50: number
  readonly p99: number
  readonly order: OrderReport
  readonly capped: boolean
  /** Requests that reached the failing (500) and slow (2 s) sinks, beside only. */
  readonly failingRequests?: number
  readonly slowRequests?: number
  /** p99 of the process's event-loop delay during the run (ms): relay, sinks and producer share that loop. */
  readonly loopDelayP99: number
}

/** The subscriptions of a set-up: the healthy one, and in `beside` a failing and a slow one. */
interface Sinks {
  readonly healthy: TrackedSink
  readonly others: { readonly name: string; readonly sink: TrackedSink; requests: number }[]
}

async function startSinks(beside: boolean, events: number, receivedAt: Float64Array): Promise<Sinks> {
  const healthy = await startTrackedSink({
    expected: events,
    delayMs: HEALTHY_DELAY_MS,
    onFirstReceipt: (body, at) => {
      receivedAt[body.data.n] = at
    },
  })
  const others: Sinks['others'] = []
  if (beside) {
    const failing = { name: 'failing', sink: undefined as unknown as TrackedSink, requests: 0 }
    failing.sink = await startTrackedSink({ expected: 0, status: 500, onRequest: () => failing.requests++ })
    const slow = { name: 'slow', sink: undefined as unknown as TrackedSink, requests: 0 }
    slow.sink = await startTrackedSink({
      expected: events,
      delayMs: SLOW_DELAY_MS,
      onRequest: () => slow.requests++,
    })
    others.push(failing, slow)
  }
  return { healthy, others }
}

async function runOnce(
  ctx: BenchContext,
  template: string,
  beside: boolean,
  stream: readonly string[],
  capMs: number,
): Promise<IsolationRun> {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const receivedAt = new Float64Array(stream.length)
  const sinks = await startSinks(beside, stream.length, receivedAt)
  const relayDb = openKysely(url, { max: 10 })
  const producerDb = openKysely(url, { max: 8 })
  const loop = monitorEventLoopDelay({ resolution: 10 })
  let relay: Relay | undefined
  try {
    await createSubscription(relayDb, { url: sinks.healthy.url, name: 'healthy' })
    for (const other of sinks.others)
      await createSubscription(relayDb, { url: other.sink.url, name: other.name })
    relay = new Relay({
      db: relayDb,
      logger: silentLogger,
      allowPrivateNetworks: true,
      concurrency: ISOLATION_CONCURRENCY,
      listen: { connectionString: url },
    })
    await relay.start()
    loop.enable()
    const t0 = now()
    const { committedAt } = await enqueueSteadily(producerDb, {
      aggregates: stream,
      perSecond: RATE_PER_SECOND,
    })
    let capped = false
    await Promise.race([
      sinks.healthy.tracker.done,
      sleep(capMs).then(() => {
        capped = true
      }),
    ])
    loop.disable()
    const arrivals = sinks.healthy.tracker.arrivals
    const end = arrivals.length > 0 ? arrivals[arrivals.length - 1]! : now()
    const values = latencies(committedAt, receivedAt)
    const [failing, slow] = sinks.others
    return {
      throughput: sinks.healthy.tracker.received / ((end - t0) / 1000),
      p50: percentile(values, 50),
      p99: percentile(values, 99),
      order: sinks.healthy.tracker.report(capped),
      capped,
      loopDelayP99: loop.percentile(99) / 1e6,
      ...(failing && slow ? { failingRequests: failing.requests, slowRequests: slow.requests } : {}),
    }
  } finally {
    // The slow sink's requests are cut: what they would still deliver is not measured.
    await relay?.stop({ timeoutMs: 200 })
    await relayDb.destroy()
    await producerDb.destroy()
    await sinks.healthy.close()
    for (const other of sinks.others) await other.sink.close()
    await ctx.databases.drop(name)
  }
}

/**
 * Isolation: one in-process relay (concurrency 32, default `maxInFlight` and breaker) serving a healthy
 * subscription whose sink answers after 20 ms, ALONE and then BESIDE two more subscriptions taking the same events:
 * one answering 500 to everything, one answering after 2 s. The healthy subscription gets the same seeded stream in
 * both (200 events/s over 1,000 aggregates, each event its own transaction, LISTEN on): a steady load well below
 * its capacity, so "throughput" says whether it keeps pace with the same offered load, and the p99 of COMMIT →
 * receipt whether it waits for slots or claims the others hold. The set-ups alternate run by run.
 */
export async function isolation(ctx: BenchContext): Promise<CaseResult> {
  const events = ctx.quick ? 500 : 6000
  const random = seededRandom(ctx.seed)
  const stream = Array.from({ length: events }, () => String(Math.floor(random() * AGGREGATES)))
  const capMs = ctx.quick ? 15_000 : 60_000
  const runs = { alone: [] as IsolationRun[], beside: [] as IsolationRun[] }
  const template = await ctx.databases.create(
    'tpl',
    await ctx.databases.schemaTemplate('outbox', installOutbox),
  )
  try {
    {
      const db = openKysely(ctx.databases.url(template), { max: 1 })
      await disableSubscription(db, IMPLICIT_SUBSCRIPTION_ID)
      await db.destroy()
      await seedDeliveredHistory(ctx.databases.url(template), ctx.quick ? 1000 : 2000)
    }
    for (let run = 0; run < ctx.runs; run++) {
      for (const beside of run % 2 === 0 ? [false, true] : [true, false]) {
        const result = await runOnce(ctx, template, beside, stream, capMs)
        ;(beside ? runs.beside : runs.alone).push(result)
        ctx.log(
          `  healthy ${beside ? 'beside failing + slow' : 'alone'}: ${Math.round(result.throughput)} deliveries/s, p50 ${result.p50.toFixed(1)} ms, p99 ${result.p99.toFixed(1)} ms, event-loop delay p99 ${result.loopDelayP99.toFixed(1)} ms${beside ? ` (failing sink: ${result.failingRequests} requests, slow sink: ${result.slowRequests})` : ''}`,
        )
      }
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const med = (list: IsolationRun[], key: 'throughput' | 'p99' | 'p50') => median(list.map((run) => run[key]))
  return {
    id: 'isolation',
    title: `Isolation: a healthy subscription (${HEALTHY_DELAY_MS} ms sink) at ${RATE_PER_SECOND} events/s, alone and beside a failing (500) and a slow (2 s) one`,
    measurements: [
      measurement(
        'healthy alone, throughput',
        'deliveries/s',
        runs.alone.map((run) => run.throughput),
        { order: runs.alone.map((run) => run.order) },
      ),
      measurement(
        'healthy alone, p99 COMMIT → receipt',
        'ms',
        runs.alone.map((run) => run.p99),
        {
          detail: {
            p50: runs.alone.map((run) => round(run.p50)),
            eventLoopDelayP99: runs.alone.map((run) => round(run.loopDelayP99)),
          },
        },
      ),
      measurement(
        'healthy beside failing + slow, throughput',
        'deliveries/s',
        runs.beside.map((run) => run.throughput),
        { order: runs.beside.map((run) => run.order) },
      ),
      measurement(
        'healthy beside failing + slow, p99',
        'ms',
        runs.beside.map((run) => run.p99),
        {
          detail: {
            p50: runs.beside.map((run) => round(run.p50)),
            eventLoopDelayP99: runs.beside.map((run) => round(run.loopDelayP99)),
            failingSinkRequests: runs.beside.map((run) => run.failingRequests),
            slowSinkRequests: runs.beside.map((run) => run.slowRequests),
          },
        },
      ),
    ],
    comparisons: [
      compare(
        'healthy throughput beside ÷ alone',
        med(runs.beside, 'throughput'),
        med(runs.alone, 'throughput'),
        {
          min: 0.9,
        },
      ),
      compare('healthy p99 beside ÷ alone', med(runs.beside, 'p99'), med(runs.alone, 'p99'), { max: 2 }),
      compare('healthy p50 beside ÷ alone', med(runs.beside, 'p50'), med(runs.alone, 'p50')),
    ],
    notes: [
      `one in-process relay, concurrency ${ISOLATION_CONCURRENCY}, LISTEN on, default maxInFlight (none) and endpoint breaker; ${events} events over ${AGGREGATES} aggregates, each to every subscription`,
      `throughput = the healthy subscription's events ÷ (stream start → its last receipt): it is the offered ${RATE_PER_SECOND}/s when it keeps pace; p99 from COMMIT returning to its sink's receipt`,
    ],
    seconds: 0,
  }
}
