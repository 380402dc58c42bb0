import type { OrderReport } from './order-tracker.js'
import type { TrackedSink } from './sink.js'
import { now, sleep } from './timing.js'

/** One timed delivery run: events per second to the sink, and what the order check saw. */
export interface DeliveryRun {
  readonly perSecond: number
  readonly seconds: number
  readonly order: OrderReport
  /** True when the time cap, not the end of the backlog, ended the run. */
  readonly capped: boolean
}

/**
 * Times a delivery system draining a backlog into the sink: the clock starts when the system is started and stops
 * at the first receipt of the last event (or at `capMs`, for systems too slow to finish in a sensible time; the
 * rate is then what arrived so far). `start` returns the system's stop function, which always runs.
 */
export async function timeDelivery(
  sink: TrackedSink,
  capMs: number,
  start: () => Promise<() => Promise<void>>,
): Promise<DeliveryRun> {
  const t0 = now()
  const stop = await start()
  let capped = false
  try {
    await Promise.race([
      sink.tracker.done,
      sleep(capMs).then(() => {
        capped = true
      }),
    ])
  } finally {
    await stop()
  }
  const arrivals = sink.tracker.arrivals
  const end = !capped && arrivals.length > 0 ? arrivals[arrivals.length - 1]! : t0 + capMs
  const seconds = Math.max(1e-3, (end - t0) / 1000)
  return { perSecond: sink.tracker.received / seconds, seconds, order: sink.tracker.report(capped), capped }
}
