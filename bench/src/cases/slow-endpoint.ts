import { Relay, silentLogger } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { BenchContext } from '../support/context.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox, seedOutboxBacklog } from '../support/outbox.js'
import { type CaseResult, type Comparison, type Measurement, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { median, round } from '../support/stats.js'
import { withTimeout } from '../support/timing.js'
import type { Backlog } from '../support/workload.js'

const LATENCY_MS = 50

/**
 * Slow endpoint: a sink answering after 50 ms, so the ideal rate is (lanes in flight) ÷ 50 ms. The rate is taken
 * between the 10th and 90th percentile of arrivals: the steady state, without the first claim's ramp-up or the
 * last lanes' tail. Measured at the default concurrency and a raised one.
 */
export async function slowEndpoint(ctx: BenchContext): Promise<CaseResult> {
  const backlog: Backlog = ctx.quick ? { events: 300, aggregates: 150 } : { events: 4000, aggregates: 2000 }
  const concurrencies = [16, 128]
  const template = await ctx.databases.create(
    'tpl',
    await ctx.databases.schemaTemplate('outbox', installOutbox),
  )
  const measurements: Measurement[] = []
  const comparisons: Comparison[] = []
  try {
    await seedOutboxBacklog(ctx.databases.url(template), backlog)
    for (const concurrency of concurrencies) {
      const rates: number[] = []
      const orders: OrderReport[] = []
      for (let run = 0; run < ctx.runs; run++) {
        const name = await ctx.databases.create('run', template)
        const sink = await startTrackedSink({ expected: backlog.events, delayMs: LATENCY_MS })
        const db = openKysely(ctx.databases.url(name), { max: 10 })
        const relay = new Relay({ db, endpoint: sink.url, logger: silentLogger, concurrency })
        try {
          await relay.start()
          await withTimeout(sink.tracker.done, 120_000, 'the slow-endpoint backlog')
        } finally {
          await relay.stop({ timeoutMs: 5000 })
          await db.destroy()
          await sink.close()
          await ctx.databases.drop(name)
        }
        const arrivals = sink.tracker.arrivals
        const from = Math.floor(arrivals.length * 0.1)
        const to = Math.floor(arrivals.length * 0.9)
        const rate = ((to - from) / (arrivals[to]! - arrivals[from]!)) * 1000
        rates.push(rate)
        orders.push(sink.tracker.report())
        ctx.log(`  concurrency ${concurrency}: ${Math.round(rate)} events/s`)
      }
      const ideal = concurrency / (LATENCY_MS / 1000)
      measurements.push(
        measurement(`outbox relay, concurrency ${concurrency}`, 'events/s', rates, {
          order: orders,
          detail: { idealPerSecond: ideal },
        }),
      )
      const ratio = median(rates) / ideal
      comparisons.push({
        label: `achieved ÷ (${concurrency} ÷ ${LATENCY_MS} ms)`,
        ratio: round(ratio),
        target: '≥ 0.9×',
        met: ratio >= 0.9,
      })
    }
  } finally {
    await ctx.databases.drop(template)
  }
  return {
    id: 'slow-endpoint',
    title: `Slow endpoint: sink answers after ${LATENCY_MS} ms, ${backlog.events} events over ${backlog.aggregates} aggregates`,
    measurements,
    comparisons,
    notes: ['rate between the 10th and 90th percentile of arrivals (steady state)'],
    seconds: 0,
  }
}
