import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { OrderTracker } from './order-tracker.js'

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
  /**
   * The status every request is answered with: 200 (`applied`) by default, or e.g. 500 for an endpoint that is
   * down. A request answered other than 2xx is not a receipt: the order check ignores it. @defaultValue 200
   */
  readonly status?: number
  /** Called for every request that arrives (repeats and failures too), with its monotonic arrival time. */
  readonly onRequest?: (at: number) => void
}

/** The one answer every system gets: the status `dedupe` answers for an applied event (without the id it adds). */
const APPLIED = Buffer.from('{"status":"applied"}')
const APPLIED_HEADERS = { 'content-type': 'application/json', 'content-length': String(APPLIED.length) }
/** What a failing endpoint answers (any status but 2xx). */
const FAILED = Buffer.from('{"title":"unavailable"}')
const FAILED_HEADERS = { 'content-type': 'application/problem+json', 'content-length': String(FAILED.length) }

/**
 * Starts a loopback webhook sink (the same one for every system compared) with an order check. Bodies carry
 * `aggregate_id` and `sequence` in every system's wire format, so one check fits all.
 *
 * Deliberately lean — a plain `node:http` handler that parses the body and answers a prebuilt buffer, keeping no
 * request log: it shares the process (and the machine's two cores) with the system under test, and its cost per
 * request should be as small as a real subscriber's "0 ms handler", so the figures are about the relays.
 */
export async function startTrackedSink(options: TrackedSinkOptions): Promise<TrackedSink> {
  const tracker = new OrderTracker(options.expected)
  const delayMs = options.delayMs ?? 0
  const status = options.status ?? 200
  const open = new Set<ServerResponse>()
  const answer = (res: ServerResponse) => {
    if (status >= 200 && status < 300) {
      res.writeHead(status, APPLIED_HEADERS)
      res.end(APPLIED)
    } else {
      res.writeHead(status, FAILED_HEADERS)
      res.end(FAILED)
    }
  }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const at = performance.now()
      options.onRequest?.(at)
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8')
      let body: any
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
      const received = status >= 200 && status < 300
      if (received && body && typeof body.aggregate_id === 'string' && typeof body.sequence === 'number') {
        if (tracker.record(body.aggregate_id, body.sequence, at)) options.onFirstReceipt?.(body, at)
      }
      if (delayMs === 0) return answer(res)
      open.add(res)
      setTimeout(() => {
        open.delete(res)
        if (!res.destroyed) answer(res)
      }, delayMs)
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    tracker,
    async close() {
      for (const res of open) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
