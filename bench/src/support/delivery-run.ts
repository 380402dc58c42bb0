import type { OrderReport } from './order-tracker.js'
import type { TrackedSink } from './sink.js'
import { now, sleep } from './timing.js'

/** One timed delivery run: events per second to the sink, and what the order check saw. */
export interface DeliveryRun {
  readonly perSecond: number
  readonly seconds: number
  /** Over all sinks when there were several: counts summed, complete only when every sink is. */
  readonly order: OrderReport
  /** True when the time cap, not the end of the backlog, ended the run. */
  readonly capped: boolean
  /** With several sinks: seconds from the start to each sink's last first receipt (its own drain time). */
  readonly perSink?: readonly number[]
}

/** One report for several sinks, each of which checked its own order (a violation is one sink's). */
function mergeReports(reports: readonly OrderReport[], capped: boolean): OrderReport {
  const sum = (key: 'expected' | 'received' | 'duplicates' | 'violations') =>
    reports.reduce((total, report) => total + report[key], 0)
  return {
    ...(capped ? { capped } : {}),
    expected: sum('expected'),
    received: sum('received'),
    duplicates: sum('duplicates'),
    violations: sum('violations'),
    complete: reports.every((report) => report.complete),
  }
}

/**
 * Times a delivery system draining a backlog into the sink (or several: one per subscription, each checking its
 * own order): the clock starts when the system is started and stops at the first receipt of the last event, at
 * whichever sink it comes last (or at `capMs`, for systems too slow to finish in a sensible time; the rate is then
 * what arrived so far). The rate counts deliveries: an event delivered to five sinks counts five times. `start`
 * returns the system's stop function, which always runs.
 */
export async function timeDelivery(
  sinks: TrackedSink | readonly TrackedSink[],
  capMs: number,
  start: () => Promise<() => Promise<void>>,
): Promise<DeliveryRun> {
  const all: readonly TrackedSink[] = Array.isArray(sinks) ? sinks : [sinks as TrackedSink]
  const t0 = now()
  const stop = await start()
  let capped = false
  try {
    await Promise.race([
      Promise.all(all.map((sink) => sink.tracker.done)),
      sleep(capMs).then(() => {
        capped = true
      }),
    ])
  } finally {
    await stop()
  }
  const lastArrival = (sink: TrackedSink) => {
    const arrivals = sink.tracker.arrivals
    return !capped && arrivals.length > 0 ? arrivals[arrivals.length - 1]! : t0 + capMs
  }
  const end = Math.max(...all.map(lastArrival))
  const seconds = Math.max(1e-3, (end - t0) / 1000)
  const received = all.reduce((total, sink) => total + sink.tracker.received, 0)
  return {
    perSecond: received / seconds,
    seconds,
    order: mergeReports(
      all.map((sink) => sink.tracker.report(capped)),
      capped,
    ),
    capped,
    ...(all.length > 1 ? { perSink: all.map((sink) => (lastArrival(sink) - t0) / 1000) } : {}),
  }
}
