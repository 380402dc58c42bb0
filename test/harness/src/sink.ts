import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/** One request the sink received. */
export interface SinkRequest {
  readonly headers: IncomingMessage['headers']
  readonly body: string
  readonly json: any
  /** Monotonic receive time (performance.now). */
  readonly at: number
}

/** What the sink answers: a status and optional body/headers, or `'hang'` (never answer) / `'destroy'` (reset). */
export type SinkAnswer =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | 'hang'
  | 'destroy'

/** A real HTTP server on 127.0.0.1 that records every request and answers what `respond` says. */
export interface Sink {
  readonly url: string
  readonly requests: SinkRequest[]
  /** Requests currently being handled, by aggregate key `type:id`. */
  readonly inFlight: Map<string, number>
  close(): Promise<void>
}

/**
 * Starts a loopback webhook sink on a free port. `respond` may be async (a slow subscriber). Hanging requests are
 * destroyed on close.
 */
export async function startSink(
  respond: (request: SinkRequest) => SinkAnswer | Promise<SinkAnswer> = () => ({
    status: 200,
    body: { status: 'applied' },
  }),
): Promise<Sink> {
  const requests: SinkRequest[] = []
  const inFlight = new Map<string, number>()
  const open = new Set<ServerResponse>()
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    let json: any
    try {
      json = JSON.parse(body)
    } catch {
      json = undefined
    }
    const request: SinkRequest = { headers: req.headers, body, json, at: performance.now() }
    requests.push(request)
    const key = json ? `${json.aggregate_type}:${json.aggregate_id}` : ''
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1)
    open.add(res)
    res.on('close', () => {
      open.delete(res)
      inFlight.set(key, (inFlight.get(key) ?? 1) - 1)
    })
    const answer = await respond(request)
    if (answer === 'hang') return
    if (answer === 'destroy') {
      req.socket.destroy()
      return
    }
    res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers })
    res.end(answer.body === undefined ? '' : JSON.stringify(answer.body))
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    requests,
    inFlight,
    async close() {
      for (const res of open) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
