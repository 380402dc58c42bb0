import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Registry } from 'prom-client'
import { CliError } from './cli-error.js'

/**
 * What `/readyz` answers: ready, or why not. The reason may name the database host and how it failed, so only a
 * probe from this machine (loopback) reads it; any other gets the bare status.
 */
export type Readiness = { readonly ready: true } | { readonly ready: false; readonly reason: string }

/** How {@link RelayHttpServer.listen} is set up. */
export interface RelayHttpOptions {
  /** Interface to listen on (`0.0.0.0`: every IPv4 interface, which a pod's probes and scrapes reach). */
  readonly host: string
  /** Port to listen on; 0 picks a free one (see {@link RelayHttpServer.port}). */
  readonly port: number
  /** The registry `/metrics` serves. */
  readonly register: Registry
  /** The readiness check `/readyz` runs; it must settle (its own time-out) and never throw. */
  readonly readiness: () => Promise<Readiness>
  /** Event-loop lag above which `/healthz` answers 503. @defaultValue {@link MAX_EVENT_LOOP_LAG_MS} */
  readonly maxEventLoopLagMs?: number
}

/**
 * Event-loop lag above which the process is called unhealthy. Far above anything a busy relay shows (its work is
 * I/O): a loop this late is stuck in a synchronous loop or starved, and a restart is the remedy.
 */
export const MAX_EVENT_LOOP_LAG_MS = 5000

/** How often the lag is sampled: a timer that fires late by N ms means the loop was busy for N ms. */
const LAG_SAMPLE_MS = 500

/**
 * The relay's operations port: `/metrics` (Prometheus text), `/healthz` (liveness) and `/readyz` (readiness), on
 * one `node:http` server.
 *
 * Liveness never touches the database: a database outage would otherwise fail every relay's liveness probe and
 * have the orchestrator restart them in a loop, which heals nothing. It only says the process answers and its
 * event loop is not stuck. Readiness is the one that asks the database and the claim loop, for rollouts and
 * alerts.
 */
export class RelayHttpServer {
  readonly #server: Server
  readonly #sampler: NodeJS.Timeout

  private constructor(server: Server, sampler: NodeJS.Timeout) {
    this.#server = server
    this.#sampler = sampler
  }

  /**
   * Starts listening; a port in use or a host that is not this machine's is one {@link CliError} line naming the
   * flag.
   */
  static async listen(options: RelayHttpOptions): Promise<RelayHttpServer> {
    const maxLagMs = options.maxEventLoopLagMs ?? MAX_EVENT_LOOP_LAG_MS
    let lagMs = 0
    const server = createServer((request, response) => {
      void answer(request, response, options, lagMs, maxLagMs)
    })
    // A probe that opens a connection and sends nothing must not hold a socket for long.
    server.requestTimeout = 10_000
    server.headersTimeout = 5_000
    server.keepAliveTimeout = 5_000
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) => {
        const where = `${options.host}:${options.port}`
        const reason =
          error.code === 'EADDRINUSE'
            ? `${where} is already in use (another relay on this host? pick another --metrics-port)`
            : error.code === 'EADDRNOTAVAIL'
              ? `${options.host} is not an address of this machine (check --metrics-host)`
              : error.code === 'EACCES'
                ? `${where} needs privileges (pick a --metrics-port above 1023)`
                : `${where}: ${error.message}`
        reject(new CliError(`cannot serve metrics on ${reason}`, 1, { cause: error }))
      })
      server.listen(options.port, options.host, () => resolve())
    })
    let expected = performance.now() + LAG_SAMPLE_MS
    const sampler = setInterval(() => {
      const now = performance.now()
      lagMs = Math.max(0, now - expected)
      expected = now + LAG_SAMPLE_MS
    }, LAG_SAMPLE_MS)
    // The sampler never keeps a stopping process alive.
    sampler.unref()
    return new RelayHttpServer(server, sampler)
  }

  /** The port listened on (the one picked when 0 was asked for). */
  get port(): number {
    return (this.#server.address() as AddressInfo).port
  }

  /** Stops listening and closes every connection, idle or not. */
  async close(): Promise<void> {
    clearInterval(this.#sampler)
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()))
    this.#server.closeAllConnections()
    await closed
  }
}

/**
 * Whether a request comes from this machine: a probe over loopback is the operator's (or a sidecar's); anything else
 * may be anyone who can reach the port, and learns no more than the status.
 */
export function fromLoopback(address: string | undefined): boolean {
  if (address === undefined) return false
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address
  return v4.startsWith('127.') || address === '::1'
}

function send(response: ServerResponse, status: number, body: unknown, method: string | undefined): void {
  const text = `${JSON.stringify(body)}\n`
  response.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
    'content-length': Buffer.byteLength(text),
  })
  response.end(method === 'HEAD' ? undefined : text)
}

async function answer(
  request: IncomingMessage,
  response: ServerResponse,
  options: RelayHttpOptions,
  lagMs: number,
  maxLagMs: number,
): Promise<void> {
  try {
    const path = new URL(request.url ?? '/', 'http://relay').pathname
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.setHeader('allow', 'GET, HEAD')
      send(response, 405, { error: 'method not allowed: use GET' }, request.method)
      return
    }
    if (path === '/metrics') {
      const text = await options.register.metrics()
      response.writeHead(200, { 'content-type': options.register.contentType, 'cache-control': 'no-store' })
      response.end(request.method === 'HEAD' ? undefined : text)
      return
    }
    if (path === '/healthz' || path === '/livez') {
      const lag = Math.round(lagMs)
      if (lag > maxLagMs) {
        send(
          response,
          503,
          {
            status: 'unhealthy',
            reason: `event loop lag ${lag} ms is above ${maxLagMs} ms`,
            eventLoopLagMs: lag,
          },
          request.method,
        )
      } else send(response, 200, { status: 'ok', eventLoopLagMs: lag }, request.method)
      return
    }
    if (path === '/readyz') {
      const readiness = await options.readiness()
      if (readiness.ready) send(response, 200, { status: 'ready' }, request.method)
      else if (fromLoopback(request.socket.remoteAddress)) {
        send(response, 503, { status: 'not ready', reason: readiness.reason }, request.method)
      } else send(response, 503, { status: 'not ready' }, request.method)
      return
    }
    send(response, 404, { error: 'not found: /metrics, /healthz and /readyz are served' }, request.method)
  } catch (error) {
    // A metric collector that failed (the gauges read the database): say so, never a stack trace, and what failed
    // only to this machine, for the same reason as /readyz's reason.
    if (!response.headersSent) {
      const detail = error instanceof Error ? error.message : String(error)
      send(
        response,
        500,
        {
          error: fromLoopback(request.socket.remoteAddress)
            ? detail
            : 'a metric could not be read (ask from this machine for why)',
        },
        request.method,
      )
    } else response.destroy()
  }
}
