import type { IncomingMessage } from 'node:http'
import { type Logger, safeLog } from '../logger.js'

const ADVICE =
  'the consumer cuts a slow body after bodyTimeoutMs, but the server holds a connection whose headers or body ' +
  'never finish for as long as it is told: set a request timeout — Node: server.requestTimeout and ' +
  'server.headersTimeout; Fastify: Fastify({ requestTimeout, connectionTimeout })'

/**
 * Warns when the server in front of a consumer has no request timeout (`requestTimeout` 0: Fastify 5's default,
 * or a Node server configured so), since then nothing but the consumer's own body deadline ever closes a
 * connection that trickles its request. Callers look once per mount: the Fastify plugin when it registers, the
 * `node:http` and Express adapters at their first request ({@link onceCheckNodeServer}).
 */
export function warnWithoutRequestTimeout(logger: Logger, server: string, requestTimeoutMs: unknown): void {
  if (requestTimeoutMs !== 0) return
  safeLog(
    logger,
    'warn',
    { server, requestTimeoutMs },
    `the ${server} server has no request timeout: ${ADVICE}`,
  )
}

/**
 * Returns a check that looks once, at the first request, at the Node server the request came through, and warns
 * if it has no request timeout. Not earlier: these adapters are a plain `(req, res)` function handed to
 * `http.createServer` or Express, so nothing reaches them from the server before a request's socket does.
 */
export function onceCheckNodeServer(logger: Logger): (req: IncomingMessage) => void {
  let checked = false
  return (req) => {
    if (checked) return
    checked = true
    const server = (req.socket as { server?: { requestTimeout?: unknown } } | undefined)?.server
    if (server !== undefined) warnWithoutRequestTimeout(logger, 'node:http', server.requestTimeout)
  }
}
