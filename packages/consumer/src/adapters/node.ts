import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Receipt, Receive } from '../core/receive.js'
import type { Logger } from '../logger.js'
import { safeLog } from '../logger.js'
import { problemResponse, refusal, type WebhookResponse } from '../respond.js'
import { onceCheckNodeServer } from './server-timeouts.js'

/**
 * Writes a consumer's answer with Node's own response API (no framework helper, so the bytes are the same under
 * every server). With `closeConnection`, `Connection: close` makes Node close the socket once the answer is sent,
 * instead of reading the rest of a refused body.
 */
export function writeNodeResponse(res: ServerResponse, answer: WebhookResponse): void {
  if (res.headersSent) return
  if (answer.closeConnection) {
    res.shouldKeepAlive = false
    res.setHeader('connection', 'close')
  }
  res.writeHead(answer.status, answer.headers)
  res.end(answer.body)
}

/** The answer when the core itself failed (a bug of ours): a 500 the sender retries, with nothing internal in it. */
export function internalFailure(logger: Logger, error: unknown, where: string): WebhookResponse {
  safeLog(
    logger,
    'error',
    { error: error instanceof Error ? { message: error.message, stack: error.stack } : String(error) },
    `unexpected failure in ${where}`,
  )
  return problemResponse(refusal('handler_failed', 'the event could not be processed; retry later'), true)
}

/**
 * The `node:http` adapter: `(req, res) => void` for `http.createServer` or any server built on it. The core reads
 * `req` itself, so nothing may read the body before it.
 */
export function nodeAdapter<TReq extends IncomingMessage>(
  receive: Receive,
  logger: Logger,
  receipt: Omit<Receipt<TReq>, 'context'>,
): (req: TReq, res: ServerResponse) => void {
  const checkServer = onceCheckNodeServer(logger)
  return (req, res) => {
    checkServer(req)
    receive(
      { method: req.method ?? 'GET', headers: req.headers, body: req },
      { ...receipt, context: req },
    ).then(
      (answer) => writeNodeResponse(res, answer),
      (error) => writeNodeResponse(res, internalFailure(logger, error, 'consumer.node')),
    )
  }
}
