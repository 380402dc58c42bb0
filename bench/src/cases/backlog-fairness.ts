import { monitorEventLoopDelay } from 'node:perf_hooks'
import {
  createSubscription,
  disableSubscription,
  type EnqueueInput,
  enqueueMany,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  silentLogger,
  updateSubscription,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import type { BenchContext } from '../support/context.js'
import { seedDeliveredHistory } from '../support/history.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { startTrackedSink, type TrackedSink } from '../support/sink.js'
import { median, percentile, round, seededRandom } from '../support/stats.js'
import { enqueueSteadily, latencies } from '../support/steady-stream.js'
import { now } from '../support/timing.js'
import { HEALTHY_DELAY_MS, ISOLATION_CONCURRENCY } from './isolation.js'

const RATE_PER_SECOND = 200
const AGGREGATES = 1000
/** The backlogged subscription's normal rate: its backlog is what an hour (full run) of it makes. */
const BACKLOG_NORMAL_PER_SECOND = 10
const BACKLOG_AGGREGATES = 500

/** One run, as the healthy subscription saw it, with how far the backlog got meanwhile. */
interface FairnessRun {
  readonly p50: number
  readonly p99: number
  readonly order: OrderReport
  /** Backlog events delivered while the healthy stream ran (beside only). */
  readonly backlogDelivered?: number
  readonly backlogOrder?: OrderReport
  /** p99 of the process's event-loop delay during the stream (ms): relay, sinks and producer share that loop. */
  readonly loopDelayP99: number
}

/** Ids of the template's subscriptions, whose URLs each run points at its own sinks. */
interface Template {
  readonly name: string
  readonly healthy: string
  readonly backlog?: string
}

/**
 * A template with the healthy subscription (`order.*`) and, beside, the backlogged one (`ledger.*`) holding
 * `backlog` events over 500 aggregates: recorded while it was down, now enabled (its sink answers as fast as the
 * healthy one's). Loaded once through the public `enqueueMany`, copied per run.
 */
async function seedTemplate(ctx: BenchContext, backlog: number): Promise<Template> {
  const name = await ctx.databases.create('tpl', await ctx.databases.schemaTemplate('outbox', installOutbox))
  const db = openKysely(ctx.databases.url(name), { max: 2 })
  try {
    await disableSubscription(db, IMPLICIT_SUBSCRIPTION_ID)
    await seedDeliveredHistory(ctx.databases.url(name), ctx.quick ? 1000 : 2000)
    const placeholder = 'http://127.0.0.1:9/unset'
    const healthy = await createSubscription(db, {
      url: placeholder,
      name: 'healthy',
      eventTypes: ['order.*'],
    })
    if (backlog === 0) return { name, healthy: healthy.id }
    const backlogged = await createSubscription(db, {
      url: placeholder,
      name: 'backlogged',
      eventTypes: ['ledger.*'],
    })
    for (let start = 0; start < backlog; start += 1000) {
      const events: EnqueueInput<unknown>[] = []
      for (let n = start; n < Math.min(backlog, start + 1000); n++) {
        const aggregateId = String(n % BACKLOG_AGGREGATES)
        events.push({ aggregateType: 'account', aggregateId, eventType: 'ledger.entry', payload: { n } })
      }
      await db.transaction().execute((trx) => enqueueMany(trx, events, { notify: false }))
    }
    await sql`VACUUM ANALYZE`.execute(db)
    return { name, healthy: healthy.id, backlog: backlogged.id }
  } finally {
    await db.destroy()
  }
}

async function runOnce(
  ctx: BenchContext,
  template: Template,
  stream: readonly string[],
  backlog: number,
): Promise<FairnessRun> {
  const name = await ctx.databases.create('run', template.name)
  const url = ctx.databases.url(name)
  const receivedAt = new Float64Array(stream.length)
  const healthy = await startTrackedSink({
    expected: stream.length,
    delayMs: HEALTHY_DELAY_MS,
    onFirstReceipt: (body, at) => {
      receivedAt[body.data.n] = at
    },
  })
  let backlogged: TrackedSink | undefined
  const relayDb = openKysely(url, { max: 10 })
  const producerDb = openKysely(url, { max: 8 })
  const loop = monitorEventLoopDelay({ resolution: 10 })
  let relay: Relay | undefined
  try {
    await updateSubscription(relayDb, template.healthy, { url: healthy.url })
    if (template.backlog) {
      backlogged = await startTrackedSink({ expected: backlog, delayMs: HEALTHY_DELAY_MS })
      await updateSubscription(relayDb, template.backlog, { url: backlogged.url })
    }
    relay = new Relay({
      db: relayDb,
      logger: silentLogger,
      allowPrivateNetworks: true,
      concurrency: ISOLATION_CONCURRENCY,
      listen: { connectionString: url },
    })
    await relay.start()
    loop.enable()
    const { committedAt } = await enqueueSteadily(producerDb, {
      aggregates: stream,
      perSecond: RATE_PER_SECOND,
    })
    const deadline = now() + 30_000
    while (healthy.tracker.received < stream.length && now() < deadline) {
      await Promise.race([healthy.tracker.done, new Promise((resolve) => setTimeout(resolve, 100))])
    }
    loop.disable()
    const values = latencies(committedAt, receivedAt)
    return {
      loopDelayP99: loop.percentile(99) / 1e6,
      p50: percentile(values, 50),
      p99: percentile(values, 99),
      order: healthy.tracker.report(now() >= deadline),
      ...(backlogged
        ? {
            backlogDelivered: backlogged.tracker.received,
            // The backlog is not expected to be drained: its order is checked on what arrived.
            backlogOrder: backlogged.tracker.report(true),
          }
        : {}),
    }
  } finally {
    await relay?.stop({ timeoutMs: 500 })
    await relayDb.destroy()
    await producerDb.destroy()
    await healthy.close()
    await backlogged?.close()
    await ctx.databases.drop(name)
  }
}

/**
 * Backlog fairness: a healthy subscription receiving a steady 200 events/s (20 ms sink, one in-process relay at
 * concurrency 32, LISTEN on), alone and beside a subscription draining a large backlog — what an hour of its normal
 * 10 events/s makes (36,000 events over 500 aggregates; 4,000 in `--quick`), its sink as fast as the healthy one's.
 * The healthy one's p99 (COMMIT → receipt) must stay within 2× of its p99 alone. The backlog outlasts the stream:
 * how much of it drained meanwhile is reported.
 */
export async function backlogFairness(ctx: BenchContext): Promise<CaseResult> {
  const backlog = ctx.quick ? 4000 : 3600 * BACKLOG_NORMAL_PER_SECOND
  const events = ctx.quick ? 500 : 4000
  const random = seededRandom(ctx.seed + 1)
  const stream = Array.from({ length: events }, () => String(Math.floor(random() * AGGREGATES)))
  const runs = { alone: [] as FairnessRun[], beside: [] as FairnessRun[] }
  const templates: Template[] = []
  try {
    templates.push(await seedTemplate(ctx, 0), await seedTemplate(ctx, backlog))
    const [alone, beside] = templates as [Template, Template]
    for (let run = 0; run < ctx.runs; run++) {
      for (const which of run % 2 === 0 ? [alone, beside] : [beside, alone]) {
        const result = await runOnce(ctx, which, stream, backlog)
        ;(which === beside ? runs.beside : runs.alone).push(result)
        ctx.log(
          `  healthy ${which === beside ? 'beside the backlog' : 'alone'}: p50 ${result.p50.toFixed(1)} ms, p99 ${result.p99.toFixed(1)} ms, event-loop delay p99 ${result.loopDelayP99.toFixed(1)} ms${result.backlogDelivered === undefined ? '' : ` (backlog: ${result.backlogDelivered} of ${backlog} delivered meanwhile)`}`,
        )
      }
    }
  } finally {
    for (const template of templates) await ctx.databases.drop(template.name)
  }
  const med = (list: FairnessRun[], key: 'p99' | 'p50') => median(list.map((run) => run[key]))
  return {
    id: 'backlog-fairness',
    title: `Backlog fairness: a healthy subscription at ${RATE_PER_SECOND} events/s beside one draining ${backlog} events`,
    measurements: [
      measurement(
        'healthy alone, p99 COMMIT → receipt',
        'ms',
        runs.alone.map((run) => run.p99),
        {
          order: runs.alone.map((run) => run.order),
          detail: {
            p50: runs.alone.map((run) => round(run.p50)),
            eventLoopDelayP99: runs.alone.map((run) => round(run.loopDelayP99)),
          },
        },
      ),
      measurement(
        'healthy beside the backlog, p99',
        'ms',
        runs.beside.map((run) => run.p99),
        {
          order: runs.beside.map((run) => run.order),
          detail: {
            p50: runs.beside.map((run) => round(run.p50)),
            eventLoopDelayP99: runs.beside.map((run) => round(run.loopDelayP99)),
          },
        },
      ),
      measurement(
        'backlog delivered while the stream ran',
        'events',
        runs.beside.map((run) => run.backlogDelivered ?? 0),
        { order: runs.beside.flatMap((run) => (run.backlogOrder ? [run.backlogOrder] : [])) },
      ),
    ],
    comparisons: [
      compare('healthy p99 beside the backlog ÷ alone', med(runs.beside, 'p99'), med(runs.alone, 'p99'), {
        max: 2,
      }),
      compare('healthy p50 beside the backlog ÷ alone', med(runs.beside, 'p50'), med(runs.alone, 'p50')),
    ],
    notes: [
      `one in-process relay, concurrency ${ISOLATION_CONCURRENCY}, LISTEN on; healthy: ${events} order events over ${AGGREGATES} aggregates; backlog: ${backlog} ledger events over ${BACKLOG_AGGREGATES} aggregates (an hour at ${BACKLOG_NORMAL_PER_SECOND}/s in the full run), both sinks ${HEALTHY_DELAY_MS} ms`,
    ],
    seconds: 0,
  }
}
