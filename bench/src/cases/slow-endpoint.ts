import { Relay, silentLogger } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { BenchContext } from '../support/context.js'
import { createJsonPoster } from '../support/http-client.js'
import type { OrderReport } from '../support/order-tracker.js'
import { installOutbox, seedOutboxBacklog } from '../support/outbox.js'
import {
  type CaseResult,
  type Comparison,
  compare,
  type Measurement,
  measurement,
} from '../support/report.js'
import { startTrackedSink, type TrackedSink } from '../support/sink.js'
import { median, round } from '../support/stats.js'
import { withTimeout } from '../support/timing.js'
import { type Backlog, backlogEvent } from '../support/workload.js'

const LATENCY_MS = 50

/** Events per second between the 10th and 90th percentile of first arrivals: the steady state. */
function steadyRate(sink: TrackedSink): number {
  const arrivals = sink.tracker.arrivals
  const from = Math.floor(arrivals.length * 0.1)
  const to = Math.floor(arrivals.length * 0.9)
  return ((to - from) / (arrivals[to]! - arrivals[from]!)) * 1000
}

/**
 * The same backlog sent by a bare loop through the same client to the same sink, with no outbox: `concurrency`
 * workers, each POSTing one aggregate's events in turn. What the sink and client allow in this process, as
 * context for the ideal (concurrency ÷ latency), which assumes a request takes exactly the sink's delay.
 */
async function bareClientRun(backlog: Backlog, concurrency: number): Promise<number> {
  const sink = await startTrackedSink({ expected: backlog.events, delayMs: LATENCY_MS })
  const poster = createJsonPoster(concurrency)
  const perAggregate = Math.ceil(backlog.events / backlog.aggregates)
  let next = 0
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < backlog.aggregates) {
          const aggregate = next++
          for (let k = 0; k < perAggregate; k++) {
            const n = aggregate + k * backlog.aggregates
            if (n >= backlog.events) break
            const event = backlogEvent(backlog, n)
            await poster.post(
              sink.url,
              JSON.stringify({
                aggregate_id: event.aggregateId,
                sequence: event.sequence,
                data: event.payload,
              }),
            )
          }
        }
      }),
    )
    return steadyRate(sink)
  } finally {
    await poster.close()
    await sink.close()
  }
}

/**
 * Slow endpoint: a sink answering after 50 ms, so the ideal rate is (lanes in flight) ÷ 50 ms. The rate is taken
 * between the 10th and 90th percentile of arrivals: the steady state, without the first claim's ramp-up or the
 * last lanes' tail. Measured at the default concurrency and a raised one, each against a bare client loop in the
 * same run (reported: how much of the distance to the ideal is the sink and client's own).
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
      const bareRates: number[] = []
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
        const rate = steadyRate(sink)
        rates.push(rate)
        orders.push(sink.tracker.report())
        const bare = await bareClientRun(backlog, concurrency)
        bareRates.push(bare)
        ctx.log(
          `  concurrency ${concurrency}: ${Math.round(rate)} events/s (bare client loop ${Math.round(bare)})`,
        )
      }
      const ideal = concurrency / (LATENCY_MS / 1000)
      measurements.push(
        measurement(`outbox relay, concurrency ${concurrency}`, 'events/s', rates, {
          order: orders,
          detail: { idealPerSecond: ideal },
        }),
        measurement(`bare client loop, concurrency ${concurrency}`, 'events/s', bareRates),
      )
      const ratio = median(rates) / ideal
      comparisons.push({
        label: `achieved ÷ (${concurrency} ÷ ${LATENCY_MS} ms)`,
        ratio: round(ratio),
        target: '≥ 0.9×',
        met: ratio >= 0.9,
      })
      comparisons.push(
        compare(`bare client loop ÷ (${concurrency} ÷ ${LATENCY_MS} ms)`, median(bareRates), ideal),
        compare(`outbox ÷ bare client loop, ${concurrency}`, median(rates), median(bareRates)),
      )
    }
  } finally {
    await ctx.databases.drop(template)
  }
  return {
    id: 'slow-endpoint',
    title: `Slow endpoint: sink answers after ${LATENCY_MS} ms, ${backlog.events} events over ${backlog.aggregates} aggregates`,
    measurements,
    comparisons,
    notes: [
      'rate between the 10th and 90th percentile of arrivals (steady state)',
      'bare client loop: the same events through the same client and sink, no outbox (concurrency workers, one aggregate at a time each)',
    ],
    seconds: 0,
  }
}
