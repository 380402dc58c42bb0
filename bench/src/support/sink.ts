import { type Sink, type SinkRequest, startSink } from '@outbox/test-harness'
import { OrderTracker } from './order-tracker.js'
import { sleep } from './timing.js'

/** A loopback webhook sink that checks per-aggregate order as requests arrive. */
export interface TrackedSink {
  readonly url: string
  readonly tracker: OrderTracker
  close(): Promise<void>
}

/** Options of {@link startTrackedSink}. */
export interface TrackedSinkOptions {
  /** Distinct events the run expects. */
  readonly expected: number
  /** Milliseconds before answering (a slow subscriber). @defaultValue 0 */
  readonly delayMs?: number
  /** Called for the first receipt of each event, with the parsed body and the monotonic receive time. */
  readonly onFirstReceipt?: (body: any, at: number) => void
}

/**
 * Starts the harness's loopback sink (the same one for every system compared) with an order check. Bodies carry
 * `aggregate_id` and `sequence` in every system's wire format, so one check fits all. The request log the harness
 * keeps is dropped as it grows: a 20,000-event run needs only the tracker's counters.
 */
export async function startTrackedSink(options: TrackedSinkOptions): Promise<TrackedSink> {
  const tracker = new OrderTracker(options.expected)
  const delayMs = options.delayMs ?? 0
  let sink: Sink | undefined
  sink = await startSink(async (request: SinkRequest) => {
    const body = request.json
    if (body && typeof body.aggregate_id === 'string' && typeof body.sequence === 'number') {
      const first = tracker.record(body.aggregate_id, body.sequence, request.at)
      if (first) options.onFirstReceipt?.(body, request.at)
    }
    if (sink && sink.requests.length > 1000) sink.requests.length = 0
    if (delayMs > 0) await sleep(delayMs)
    return { status: 200, body: { status: 'applied' } }
  })
  const started = sink
  return {
    url: started.url,
    tracker,
    close: () => started.close(),
  }
}
