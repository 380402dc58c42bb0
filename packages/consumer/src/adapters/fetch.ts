import type { Receipt, Receive } from '../core/receive.js'
import type { Logger } from '../logger.js'
import type { WebhookResponse } from '../respond.js'
import { internalFailure } from './node.js'

function toResponse(answer: WebhookResponse): Response {
  const headers = new Headers(answer.headers)
  // Servers that map a web Response onto Node (Hono's node-server, Next.js) pass this on, and Node then closes
  // the socket instead of reading the rest of a refused body.
  if (answer.closeConnection) headers.set('connection', 'close')
  return new Response(answer.body, { status: answer.status, headers })
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
        { method: request.method, headers: request.headers, body: request.body },
        { ...receipt, context: request },
      )
      return toResponse(answer)
    } catch (error) {
      return toResponse(internalFailure(logger, error, 'consumer.fetch'))
    }
  }
}
