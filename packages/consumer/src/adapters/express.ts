import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BodySource } from '../core/read-body.js'
import type { Receipt, Receive } from '../core/receive.js'
import { OutboxError } from '../errors.js'
import type { ExpressRequest } from '../handler.js'
import type { Logger } from '../logger.js'
import { refusal } from '../respond.js'
import { internalFailure, writeNodeResponse } from './node.js'
import { onceCheckNodeServer } from './server-timeouts.js'

/**
 * An Express (4 or 5) middleware, typed structurally so the consumer's types need nothing of Express installed:
 * `app.post('/hooks', consumer.dedupe(handler))` accepts it.
 *
 * @example
 * ```ts
 * import type { ExpressMiddleware } from '@outbox/consumer'
 * const chain: ExpressMiddleware[] = []
 * ```
 */
export type ExpressMiddleware = (
  req: ExpressRequest,
  res: ServerResponse,
  next: (error?: unknown) => void,
) => void

const MOUNTING_HELP =
  'the request body was already parsed by another middleware (e.g. express.json()); signatures need the exact raw ' +
  "bytes, so mount dedupe without a JSON parser in front of it — app.post('/hooks', dedupe(handler)) ahead of " +
  "app.use(express.json()) — or with express.raw({ type: 'application/json' }) in front of it"

/**
 * True when something (usually `express.json()`) has already read or replaced the request body, so the exact
 * bytes a signature covers are gone. Checks the stream itself (read from or ended), the flag body-parser 1.x
 * sets, and a `req.body` that is more than the `{}` placeholder Express 4 parsers leave on requests they skip.
 * A `Buffer` body (left by `express.raw()`) is not consumed: it IS the raw bytes.
 */
export function isBodyConsumed(req: IncomingMessage & { body?: unknown; _body?: unknown }): boolean {
  if (req.readableDidRead || req.readableEnded || req._body === true) return true
  const body = req.body
  if (body === undefined || body === null) return false
  const isEmptyObject =
    typeof body === 'object' &&
    Object.getPrototypeOf(body) === Object.prototype &&
    Object.keys(body).length === 0
  return !isEmptyObject
}

/**
 * The Express adapter behind `consumer.dedupe`: the raw stream when nothing read it, the `Buffer` when
 * `express.raw()` did (the idiom Stripe's and Svix's docs teach), and a clear 500 `body_already_parsed` when a
 * JSON parser got there first (a mounting mistake no retry fixes, so it is loud).
 */
export function expressAdapter(
  receive: Receive,
  logger: Logger,
  receipt: Omit<Receipt<ExpressRequest>, 'context' | 'mountingProblem'>,
): ExpressMiddleware {
  const checkServer = onceCheckNodeServer(logger)
  return (req, res, next) => {
    checkServer(req)
    let body: BodySource | null = req
    let mountingProblem: ReturnType<typeof refusal> | undefined
    if (Buffer.isBuffer(req.body)) body = req.body
    else if (isBodyConsumed(req)) {
      body = null
      mountingProblem = refusal('body_already_parsed', MOUNTING_HELP, {
        cause: new OutboxError('ERR_OUTBOX_BODY_ALREADY_PARSED', MOUNTING_HELP),
      })
    }
    receive(
      { method: req.method ?? 'GET', headers: req.headers, body },
      { ...receipt, context: req, mountingProblem },
    ).then(
      (answer) => writeNodeResponse(res, answer),
      (error) => {
        if (res.headersSent) return next(error)
        writeNodeResponse(res, internalFailure(logger, error, 'dedupe'))
      },
    )
  }
}
