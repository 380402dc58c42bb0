import { randomBytes } from 'node:crypto'
import {
  createSubscription,
  DEFAULT_CONCURRENCY,
  disableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  migrate,
  Relay,
  type RelayOptions,
  silentLogger,
  stats,
  updateSubscription,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { BenchContext } from '../support/context.js'
import { type DeliveryRun, timeDelivery } from '../support/delivery-run.js'
import { installOutbox, seedOutboxBacklog } from '../support/outbox.js'
import { type CaseResult, compare, type Measurement, measurement } from '../support/report.js'
import { startTrackedSink, type TrackedSink } from '../support/sink.js'
import { median, round } from '../support/stats.js'
import type { Backlog } from '../support/workload.js'

/** One relay set-up under test: how many stored subscriptions (0 = the implicit one, through `endpoint`). */
interface Setup {
  readonly name: string
  readonly subscriptions: number
  /** The relay's `deliveryLog`, when not its default (every attempt for stored subscriptions, failures for `endpoint`). */
  readonly deliveryLog?: RelayOptions['deliveryLog']
}

const SETUPS: readonly Setup[] = [
  { name: 'implicit subscription (endpoint)', subscriptions: 0 },
  { name: '1 stored subscription', subscriptions: 1 },
  { name: '5 stored subscriptions', subscriptions: 5 },
  // The stored subscription with the implicit one's delivery log: what its default log of every 2xx costs.
  { name: '1 stored subscription, failures logged only', subscriptions: 1, deliveryLog: 'failures' },
]

/**
 * Relay options every set-up shares, so only the subscriptions differ. A stored subscription always signs with its
 * secret, so the endpoint relay gets one too: every request of every set-up carries one HMAC.
 */
const COMMON = {
  logger: silentLogger,
  allowPrivateNetworks: true,
  concurrency: DEFAULT_CONCURRENCY,
} satisfies Partial<RelayOptions>
const ENDPOINT_SECRET = `whsec_${randomBytes(32).toString('base64')}`

/**
 * A template with the backlog recorded for `count` stored subscriptions (the implicit one disabled), or for the
 * implicit one alone when `count` is 0. Fan-out happens at enqueue, so the subscriptions exist before the backlog
 * is loaded. Their URLs are placeholders: each run points them at its own sinks. Returns their ids.
 */
async function seedTemplate(url: string, backlog: Backlog, count: number): Promise<string[]> {
  const ids: string[] = []
  const db = openKysely(url, { max: 1 })
  try {
    await migrate(db)
    if (count > 0) await disableSubscription(db, IMPLICIT_SUBSCRIPTION_ID)
    for (let i = 0; i < count; i++) {
      const { id } = await createSubscription(db, { url: 'http://127.0.0.1:9/unset', name: `sink-${i}` })
      ids.push(id)
    }
  } finally {
    await db.destroy()
  }
  await seedOutboxBacklog(url, backlog)
  return ids
}

/** One run of a set-up: a fresh copy of its template, one sink per subscription, the relay timed until drained. */
async function runOnce(
  ctx: BenchContext,
  setup: Setup,
  template: { readonly name: string; readonly ids: readonly string[] },
  backlog: Backlog,
  capMs: number,
): Promise<DeliveryRun> {
  const name = await ctx.databases.create('run', template.name)
  const url = ctx.databases.url(name)
  const sinks: TrackedSink[] = []
  try {
    for (let i = 0; i < Math.max(1, setup.subscriptions); i++) {
      sinks.push(await startTrackedSink({ expected: backlog.events }))
    }
    const db = openKysely(url, { max: 10 })
    try {
      for (const [i, id] of template.ids.entries()) await updateSubscription(db, id, { url: sinks[i]!.url })
      return await timeDelivery(sinks, capMs, async () => {
        const relay = new Relay({
          ...COMMON,
          db,
          ...(setup.subscriptions === 0 ? { endpoint: sinks[0]!.url, secret: ENDPOINT_SECRET } : {}),
          ...(setup.deliveryLog === undefined ? {} : { deliveryLog: setup.deliveryLog }),
        })
        await relay.start()
        return async () => {
          await relay.stop({ timeoutMs: 5000 })
          const left = await stats(db)
          if (left.pending > 0 && left.inFlight === 0) {
            process.stderr.write(`  (${left.pending} deliveries still pending after stop)\n`)
          }
        }
      })
    } finally {
      await db.destroy()
    }
  } finally {
    for (const sink of sinks) await sink.close()
    await ctx.databases.drop(name)
  }
}

/**
 * Subscriptions: the same backlog drained by one in-process relay serving the implicit subscription (`endpoint`),
 * one stored subscription, and five stored subscriptions with a sink each (every event then delivered five times);
 * and the one stored subscription again with the implicit one's delivery log (failures only), which says how much of
 * the difference between the first two is the log of every 2xx a stored subscription keeps by default.
 * Same relay options in all three; the rate counts deliveries. Each sink checks its own subscription's order. The
 * set-ups take turns run by run, in rotating order, so drift on the machine hits all alike.
 */
export async function subscriptions(ctx: BenchContext): Promise<CaseResult> {
  const backlog: Backlog = ctx.quick
    ? { events: 1000, aggregates: 100 }
    : { events: 20_000, aggregates: 1000 }
  const capMs = ctx.quick ? 30_000 : 180_000
  const templates = new Map<Setup, { name: string; ids: string[] }>()
  const runs = new Map<Setup, DeliveryRun[]>(SETUPS.map((setup) => [setup, []]))
  try {
    const schema = await ctx.databases.schemaTemplate('outbox', installOutbox)
    for (const setup of SETUPS) {
      const name = await ctx.databases.create('tpl', schema)
      templates.set(setup, { name, ids: [] })
      templates.get(setup)!.ids = await seedTemplate(ctx.databases.url(name), backlog, setup.subscriptions)
    }
    for (let run = 0; run < ctx.runs; run++) {
      for (let i = 0; i < SETUPS.length; i++) {
        const setup = SETUPS[(i + run) % SETUPS.length]!
        const result = await runOnce(ctx, setup, templates.get(setup)!, backlog, capMs)
        runs.get(setup)!.push(result)
        ctx.log(
          `  ${setup.name}: ${Math.round(result.perSecond)} deliveries/s (${result.order.received} in ${result.seconds.toFixed(2)} s)`,
        )
      }
    }
  } finally {
    for (const { name } of templates.values()) await ctx.databases.drop(name)
  }

  const measurements: Measurement[] = SETUPS.map((setup) => {
    const list = runs.get(setup)!
    const spread = list.flatMap((run) =>
      run.perSink ? [Math.max(...run.perSink) / Math.min(...run.perSink)] : [],
    )
    return measurement(
      setup.name,
      'deliveries/s',
      list.map((run) => run.perSecond),
      {
        order: list.map((run) => run.order),
        ...(spread.length > 0
          ? {
              detail: {
                drainSecondsPerSubscription: list.map((run) => run.perSink!.map(round)),
                slowestOverFastestSubscription: spread.map(round),
              },
            }
          : {}),
      },
    )
  })
  const rate = (setup: Setup) => median(runs.get(setup)!.map((run) => run.perSecond))
  const [implicit, one, five, oneFailuresLogged] = SETUPS as [Setup, Setup, Setup, Setup]
  return {
    id: 'subscriptions',
    title: `Subscriptions: ${backlog.events} events over ${backlog.aggregates} aggregates, 0 ms sink per subscription`,
    measurements,
    comparisons: [
      compare('5 subscriptions ÷ implicit (deliveries/s)', rate(five), rate(implicit), { min: 0.8 }),
      compare('1 subscription ÷ implicit', rate(one), rate(implicit)),
      compare('5 subscriptions ÷ 1 subscription', rate(five), rate(one)),
      compare('1 subscription, failures logged only ÷ implicit', rate(oneFailuresLogged), rate(implicit)),
      compare('1 subscription ÷ the same, failures logged only', rate(one), rate(oneFailuresLogged)),
    ],
    notes: [
      `one in-process relay, concurrency ${DEFAULT_CONCURRENCY}, every request signed; a delivery = one event to one subscription (5 subscriptions: 5 × ${backlog.events})`,
      'order checked per subscription (one sink each); the slowest ÷ fastest subscription drain time is in latest.json',
    ],
    seconds: 0,
  }
}
