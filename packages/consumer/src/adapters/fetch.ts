import { type BodySource, WholeBody } from '../core/read-body.js'
import type { Receipt, Receive } from '../core/receive.js'
import type { Logger } from '../logger.js'
import type { WebhookResponse } from '../respond.js'
import { internalFailure } from './node.js'

function toResponse(answer: WebhookResponse): Response {
  // A plain record, not a Headers: servers that map a web Response onto Node (Hono's node-server) write a record
  // as it is. `Connection: close` is passed on, and Node then closes the socket instead of reading the rest of a
  // refused body.
  const headers = answer.closeConnection ? { ...answer.headers, connection: 'close' } : answer.headers
  return new Response(answer.body, { status: answer.status, headers })
}

const EMPTY = new Uint8Array(0)
const DECIMAL = /^\d+$/

/**
 * The request's body as the core reads it, touched only when the core asks — after every header check. With a
 * `content-length` the body is exactly that long (HTTP frames it so), and the core has already refused a length
 * over `maxBodyBytes` on the headers: it is read in one `arrayBuffer()`, which servers that wrap Node
 * (`@hono/node-server`) serve straight from the socket, where `request.body` makes them build a full web
 * `Request` and a stream first; the core awaits it against the body's deadline, with no iterator around it. Without one (chunked), the stream is read chunk by chunk and stopped at the limit.
 */
function bodyOf(request: Request): BodySource | null {
  if (request.method === 'GET' || request.method === 'HEAD') return null
  // Already read (request.json() in a middleware): the locked stream tells the core, which answers
  // body_already_parsed; arrayBuffer() would only throw.
  if (request.bodyUsed) return request.body
  const length = request.headers.get('content-length')
  if (length === null || !DECIMAL.test(length)) return request.body
  if (length === '0') return EMPTY
  return new WholeBody(() => request.arrayBuffer().then((buffer) => new Uint8Array(buffer)))
}

/**
 * The web-standard adapter: `(request: Request) => Promise<Response>`, which Hono, Next.js route handlers, Bun,
 * Deno and Cloudflare-style runtimes mount directly. The core reads `request.body` itself, up to `maxBodyBytes`.
 */
export function fetchAdapter(
  receive: Receive,
  logger: Logger,
  receipt: Omit<Receipt<Request>, 'context'>,
): (request: Request) => Promise<Response> {
  return async (request) => {
    try {
      const answer = await receive(
        { method: request.method, headers: request.headers, body: bodyOf(request) },
        { ...receipt, context: request },
      )
      return toResponse(answer)
    } catch (error) {
      return toResponse(internalFailure(logger, error, 'consumer.fetch'))
    }
  }
}
