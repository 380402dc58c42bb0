import { monitorEventLoopDelay } from 'node:perf_hooks'
import {
  createSubscription,
  disableSubscription,
  type EnqueueInput,
  enqueueMany,
  IMPLICIT_SUBSCRIPTION_ID,
  updateSubscription,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import type { BenchContext } from '../support/context.js'
import { seedDeliveredHistory } from '../support/history.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox, type RelayProcess, spawnRelayProcess } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { type SinkProcess, spawnSinkProcess } from '../support/sink-process.js'
import { median, percentile, round, seededRandom } from '../support/stats.js'
import { enqueueSteadily, latencies } from '../support/steady-stream.js'
import { now } from '../support/timing.js'
import { HEALTHY_DELAY_MS, ISOLATION_CONCURRENCY } from './isolation.js'

const RATE_PER_SECOND = 200
const AGGREGATES = 1000
/** The backlogged subscription's normal rate: its backlog is what an hour (full run) of it makes. */
const BACKLOG_NORMAL_PER_SECOND = 10
const BACKLOG_AGGREGATES = 500
/**
 * How long the relay runs before the healthy stream starts. The figure is about a backlog being drained, not about a
 * relay starting beside one: its first claim beside 36,000 due rows (cold caches, a plan made for the first time, no
 * subscription yet known to have a backlog) held the events committed in the first second for 100–300 ms, which alone
 * decided the p99 of a 20 s stream.
 */
const WARM_UP_MS = 2000
/** The smoke run's warm-up: its figures are no target, and CI time is. */
const QUICK_WARM_UP_MS = 500

/** One run, as the healthy subscription saw it, with how far the backlog got meanwhile. */
interface FairnessRun {
  readonly p50: number
  readonly p99: number
  readonly order: OrderReport
  /** Backlog events delivered from the relay's start (the warm-up included) to the stream's end (beside only). */
  readonly backlogDelivered?: number
  readonly backlogOrder?: OrderReport
  /** p99 of this process's event-loop delay during the stream (ms): the producer and the healthy sink's loop. */
  readonly loopDelayP99: number
  /** p99 of the relay process's event-loop delay (ms). */
  readonly relayLoopDelayP99: number
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
  let backlogged: SinkProcess | undefined
  const producerDb = openKysely(url, { max: 8 })
  const loop = monitorEventLoopDelay({ resolution: 10 })
  let relay: RelayProcess | undefined
  try {
    await updateSubscription(producerDb, template.healthy, { url: healthy.url })
    if (template.backlog) {
      // The backlog's subscriber is another server: its requests do not share this process, which takes the
      // healthy subscription's commit and receipt times.
      backlogged = await spawnSinkProcess({ expected: backlog, delayMs: HEALTHY_DELAY_MS })
      await updateSubscription(producerDb, template.backlog, { url: backlogged.url })
    }
    // The relay in its own process, as `outbox relay` runs: what is measured is its scheduling between the two
    // subscriptions, not how the producer and sinks in this process delay its event loop.
    relay = await spawnRelayProcess({
      url,
      listen: true,
      allowPrivateNetworks: true,
      concurrency: ISOLATION_CONCURRENCY,
    })
    await relay.go()
    await new Promise((resolve) => setTimeout(resolve, ctx.quick ? QUICK_WARM_UP_MS : WARM_UP_MS))
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
    const relayLoopDelayP99 = await relay.loopDelayP99()
    const values = latencies(committedAt, receivedAt)
    // The backlog is not expected to be drained: its order is checked on what arrived.
    const backlogOrder = await backlogged?.report()
    return {
      loopDelayP99: loop.percentile(99) / 1e6,
      relayLoopDelayP99,
      p50: percentile(values, 50),
      p99: percentile(values, 99),
      order: healthy.tracker.report(now() >= deadline),
      ...(backlogOrder ? { backlogDelivered: backlogOrder.received, backlogOrder } : {}),
    }
  } finally {
    await relay?.stop()
    await producerDb.destroy()
    await healthy.close()
    await backlogged?.stop()
    await ctx.databases.drop(name)
  }
}

/**
 * Backlog fairness: a healthy subscription receiving a steady 200 events/s (20 ms sink, one relay in its own process at
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
          `  healthy ${which === beside ? 'beside the backlog' : 'alone'}: p50 ${result.p50.toFixed(1)} ms, p99 ${result.p99.toFixed(1)} ms, event-loop delay p99 ${result.loopDelayP99.toFixed(1)} ms (relay's ${result.relayLoopDelayP99.toFixed(1)} ms)${result.backlogDelivered === undefined ? '' : ` (backlog: ${result.backlogDelivered} of ${backlog} delivered since the relay started)`}`,
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
            relayEventLoopDelayP99: runs.alone.map((run) => round(run.relayLoopDelayP99)),
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
            relayEventLoopDelayP99: runs.beside.map((run) => round(run.relayLoopDelayP99)),
          },
        },
      ),
      measurement(
        "backlog delivered from the relay's start to the stream's end",
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
      `one relay in its own process, concurrency ${ISOLATION_CONCURRENCY}, LISTEN on; healthy: ${events} order events over ${AGGREGATES} aggregates, its sink in the measuring process; backlog: ${backlog} ledger events over ${BACKLOG_AGGREGATES} aggregates (an hour at ${BACKLOG_NORMAL_PER_SECOND}/s in the full run), its sink in a process of its own; both sinks ${HEALTHY_DELAY_MS} ms`,
    ],
    seconds: 0,
  }
}
