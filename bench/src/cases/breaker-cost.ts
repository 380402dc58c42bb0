import diagnostics from 'node:diagnostics_channel'
import {
  createSubscription,
  DEFAULT_ENDPOINT_BREAKER,
  disableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { BenchContext } from '../support/context.js'
import { seedDeliveredHistory } from '../support/history.js'
import { installOutbox } from '../support/outbox.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { median, round, seededRandom } from '../support/stats.js'
import { enqueueSteadily } from '../support/steady-stream.js'
import { now, sleep } from '../support/timing.js'
import { HEALTHY_DELAY_MS, ISOLATION_CONCURRENCY } from './isolation.js'

const RATE_PER_SECOND = 200
const AGGREGATES = 1000
const RELAYS = 2

/** One run: the failing sink's requests counted per cool-down window, from the breaker's first opening. */
interface BreakerRun {
  /** Requests started in each window [opening i, opening i + 1), the last one ending with the run. */
  readonly perWindow: number[]
  /** The same by arrival at the sink (a request started just before an opening may arrive just after it). */
  readonly arrivedPerWindow: number[]
  /** Requests before the breaker first opened (the failure streak that opened it). */
  readonly beforeOpen: number
  readonly probes: number
}

/**
 * Breaker cost: TWO in-process relays (each its own pool, concurrency 32, LISTEN on) serve a subscription whose
 * endpoint answers 500 to everything beside a healthy one, both taking a steady 200 events/s over 1,000 aggregates.
 * Every request reaching the failing sink is timed; the windows are the cool-downs, from each `endpoint:opened`
 * (either relay's; the first is the failure streak, the next ones failed probes) to the next. The target: at most
 * one request per cool-down across all relays, the first one included — lanes claimed before the breaker opened
 * must hand themselves back, in the relay that opened it and in the other.
 */
export async function breakerCost(ctx: BenchContext): Promise<CaseResult> {
  // Quick: a shorter cool-down (doubling after each failed probe as usual) so that a few windows fit in seconds.
  const cooldownMs = ctx.quick ? 1000 : DEFAULT_ENDPOINT_BREAKER.cooldownMs
  const observeMs = ctx.quick ? 4000 : 35_000
  const breaker = { ...DEFAULT_ENDPOINT_BREAKER, cooldownMs }
  const random = seededRandom(ctx.seed)
  const template = await ctx.databases.create(
    'tpl',
    await ctx.databases.schemaTemplate('outbox', installOutbox),
  )
  const runs: BreakerRun[] = []
  try {
    {
      const db = openKysely(ctx.databases.url(template), { max: 1 })
      await disableSubscription(db, IMPLICIT_SUBSCRIPTION_ID)
      await db.destroy()
      await seedDeliveredHistory(ctx.databases.url(template), ctx.quick ? 1000 : 2000)
    }
    for (let run = 0; run < ctx.runs; run++) {
      const result = await runOnce(ctx, template, breaker, observeMs, random)
      runs.push(result)
      ctx.log(
        `  failing sink: ${result.beforeOpen} requests before the first opening, then per cool-down ${result.perWindow.join(' / ')} started, ${result.arrivedPerWindow.join(' / ')} arrived (${result.probes} probes)`,
      )
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const first = runs.map((run) => run.perWindow[0] ?? Number.NaN)
  const later = runs.map((run) => Math.max(0, ...run.perWindow.slice(1)))
  const most = runs.map((run) => Math.max(0, ...run.perWindow))
  return {
    id: 'breaker-cost',
    title: `Breaker cost: a failing (500) subscription beside a healthy one, ${RELAYS} relays, cool-down ${cooldownMs} ms`,
    measurements: [
      measurement('requests in the first cool-down', 'requests', first, {
        detail: {
          startedPerWindow: runs.map((run) => run.perWindow),
          arrivedPerWindow: runs.map((run) => run.arrivedPerWindow),
        },
      }),
      measurement('most requests in a later cool-down', 'requests', later),
      measurement(
        'requests before the first opening',
        'requests',
        runs.map((run) => run.beforeOpen),
        {
          detail: { failuresToOpen: breaker.failures, probes: runs.map((run) => run.probes) },
        },
      ),
    ],
    comparisons: [compare('most requests per cool-down (all relays)', median(most), 1, { max: 1 })],
    notes: [
      `${RELAYS} in-process relays, concurrency ${ISOLATION_CONCURRENCY} each, endpointBreaker { failures: ${breaker.failures}, cooldownMs: ${cooldownMs} } (doubling after each failed probe); ${RATE_PER_SECOND} events/s over ${AGGREGATES} aggregates to both subscriptions, observed ${round(observeMs / 1000)} s after the first opening`,
      'a window runs from one endpoint:opened to the next (or the end); a request counts where the relay created it (undici:request:create), its arrival at the sink is in the JSON',
    ],
    seconds: 0,
  }
}

async function runOnce(
  ctx: BenchContext,
  template: string,
  breaker: typeof DEFAULT_ENDPOINT_BREAKER,
  observeMs: number,
  random: () => number,
): Promise<BreakerRun> {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const arrivals: number[] = []
  const failing = await startTrackedSink({ expected: 0, status: 500, onRequest: (at) => arrivals.push(at) })
  // When each request to the failing sink was created in the relays' HTTP client (undici publishes it): a request
  // is counted in the window in which a relay decided to send it, not where a busy event loop let the sink read it.
  const failingOrigin = new URL(failing.url).origin
  const starts: number[] = []
  const onCreate = (message: unknown) => {
    const { request } = message as { request: { origin?: string | URL } }
    if (String(request.origin) === failingOrigin) starts.push(now())
  }
  diagnostics.subscribe('undici:request:create', onCreate)
  const healthy = await startTrackedSink({ expected: Number.MAX_SAFE_INTEGER, delayMs: HEALTHY_DELAY_MS })
  const producerDb = openKysely(url, { max: 8 })
  const pools = Array.from({ length: RELAYS }, () => openKysely(url, { max: 10 }))
  const relays: Relay[] = []
  const openings: number[] = []
  let probes = 0
  try {
    const { id } = await createSubscription(producerDb, { url: failing.url, name: 'failing' })
    await createSubscription(producerDb, { url: healthy.url, name: 'healthy' })
    for (const db of pools) {
      const relay = new Relay({
        db,
        logger: silentLogger,
        allowPrivateNetworks: true,
        concurrency: ISOLATION_CONCURRENCY,
        endpointBreaker: breaker,
        listen: { connectionString: url },
      })
      relay.on('endpoint:opened', (event) => {
        if (event.subscriptionId === id) openings.push(now())
      })
      relay.on('endpoint:probing', (event) => {
        if (event.subscriptionId === id) probes += 1
      })
      relays.push(relay)
      await relay.start()
    }
    // The stream goes on until the observation ends (or a generous cap, should the breaker never open).
    const started = now()
    const capMs = observeMs + 30_000
    const ended = () => {
      const at = now()
      return openings.length > 0 ? at - openings[0]! >= observeMs : at - started >= capMs
    }
    const stream = Array.from({ length: Math.ceil(((capMs + observeMs) / 1000) * RATE_PER_SECOND) }, () =>
      String(Math.floor(random() * AGGREGATES)),
    )
    await enqueueSteadily(producerDb, { aggregates: stream, perSecond: RATE_PER_SECOND, stop: ended })
    // Requests in flight when the stream stopped still arrive within a round trip.
    await sleep(50)
    const end = now()
    if (openings.length === 0)
      return { perWindow: [], arrivedPerWindow: [], beforeOpen: starts.length, probes }
    const bounds = [...openings, end]
    const count = (times: readonly number[]) =>
      openings.map((from, i) => times.filter((at) => at >= from && at < bounds[i + 1]!).length)
    return {
      perWindow: count(starts),
      arrivedPerWindow: count(arrivals),
      beforeOpen: starts.filter((at) => at < openings[0]!).length,
      probes,
    }
  } finally {
    diagnostics.unsubscribe('undici:request:create', onCreate)
    for (const relay of relays) await relay.stop({ timeoutMs: 500 })
    for (const db of pools) await db.destroy()
    await producerDb.destroy()
    await failing.close()
    await healthy.close()
    await ctx.databases.drop(name)
  }
}
