/**
 * The Fastify adapter of `@outbox/consumer`, in its own entry point so the main one never imports Fastify's types:
 * `app.register(outboxWebhooks, { consumer, path: '/hooks', handler })`.
 *
 * @packageDocumentation
 */
import type { EventCatalog } from '@outbox/protocol'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { internalFailure } from './adapters/node.js'
import { warnWithoutRequestTimeout } from './adapters/server-timeouts.js'
import type { Consumer } from './consumer.js'
import { CORE, type ConsumerCore } from './core/internal.js'
import { contentTypeProblem } from './core/receive.js'
import { OutboxError } from './errors.js'
import type { EnvelopeKind, HandlerEvent, ReceiptHandler } from './handler.js'
import type { ErrorListener } from './options.js'
import type { WebhookResponse } from './respond.js'

/**
 * Options of {@link outboxWebhooks}.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import type { OutboxWebhooksOptions } from '@outbox/consumer/fastify'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * const options: OutboxWebhooksOptions = { consumer, path: '/hooks', handler: async (event) => console.log(event.type) }
 * ```
 */
export interface OutboxWebhooksOptions<
  DB = any,
  Catalog extends EventCatalog = any,
  Kind extends EnvelopeKind = 'outbox',
> {
  /**
   * The consumer from `createConsumer(…)`, of any database, catalog or envelope: `app.register` cannot carry its
   * types to `handler`, which is typed by this interface's own parameters instead.
   */
  readonly consumer: Consumer<any, any, any>
  /** The route's path, under the plugin's prefix if registered with one. @defaultValue '/' */
  readonly path?: string
  /** The application's code for one event; its third argument is the `FastifyRequest`. */
  readonly handler: ReceiptHandler<HandlerEvent<Catalog, any, Kind>, DB, FastifyRequest>
  /** Called for every refusal with the `FastifyRequest`, after the consumer's own `onError`. */
  readonly onError?: ErrorListener<FastifyRequest>
}

function send(reply: FastifyReply, answer: WebhookResponse): FastifyReply {
  reply.code(answer.status).headers(answer.headers)
  // Fastify writes through Node's response: `Connection: close` makes Node close the socket after the answer
  // instead of reading the rest of a refused body.
  if (answer.closeConnection) reply.header('connection', 'close')
  return reply.send(answer.body)
}

/**
 * The Fastify plugin: one route (every method; anything but POST is answered 405) whose body Fastify does not
 * parse — the consumer reads the raw stream itself, up to `maxBodyBytes`, after checking the headers.
 *
 * Encapsulated on purpose (it is not wrapped in `fastify-plugin`): the catch-all content-type parser that leaves
 * the body unread is registered inside the plugin's own context, so the application's JSON parser keeps working
 * on every other route.
 *
 * With a catalog (`createConsumer<DB, Catalog>`), register `outboxWebhooks<DB, Catalog, 'outbox'>` (or
 * `'received'` for a custom `envelope`): the handler's `event.data` then narrows by `event.type`. Registered as
 * plain `outboxWebhooks`, the handler gets any consumer's events, `data` untyped.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import { outboxWebhooks } from '@outbox/consumer/fastify'
 * import Fastify from 'fastify'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * const app = Fastify()
 * await app.register(outboxWebhooks, {
 *   consumer,
 *   path: '/hooks',
 *   handler: async (event, trx) => {
 *     await trx.insertInto('audit').values({ event_id: event.eventId }).execute()
 *   },
 * })
 * ```
 */
export function outboxWebhooks<DB, Catalog extends EventCatalog, Kind extends EnvelopeKind>(
  fastify: FastifyInstance,
  options: OutboxWebhooksOptions<DB, Catalog, Kind>,
): Promise<void>
// Last on purpose: `app.register(outboxWebhooks, { … })` infers its options from a plugin's last signature, and a
// generic one leaves the handler's parameters untyped (implicit any). This one types the event as the relay's
// `OutboxEvent` (annotate `ReceivedEvent` for a consumer with its own `envelope`); for a catalog's narrowing,
// register `outboxWebhooks<DB, Catalog, 'outbox'>`.
export function outboxWebhooks(fastify: FastifyInstance, options: OutboxWebhooksOptions): Promise<void>
export async function outboxWebhooks(
  fastify: FastifyInstance,
  options: OutboxWebhooksOptions,
): Promise<void> {
  const core = (options?.consumer as unknown as { [CORE]?: ConsumerCore } | undefined)?.[CORE]
  if (core === undefined) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'outboxWebhooks: pass `consumer`, the result of createConsumer(…) from @outbox/consumer',
      { option: 'consumer' },
    )
  }
  if (typeof options.handler !== 'function') {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'outboxWebhooks: pass `handler`, e.g. handler: async (event, trx, request) => { … }',
      { option: 'handler' },
    )
  }
  const { receive, logger } = core
  // Fastify 5 never times a request out by default: a trickled body would otherwise hold its connection forever
  // (the consumer's own deadline still answers it, and closes the connection).
  warnWithoutRequestTimeout(logger, 'Fastify', fastify.server.requestTimeout)
  const receipt = { handler: options.handler, onError: options.onError }

  fastify.removeAllContentTypeParsers()
  // Leave the body unread: the consumer reads request.raw itself, only once the headers pass.
  fastify.addContentTypeParser('*', (_request, _payload, done) => done(null, undefined))

  const answer = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    try {
      const answered = await receive(
        { method: request.method, headers: request.raw.headers, body: request.raw },
        { ...receipt, context: request },
      )
      return send(reply, answered)
    } catch (error) {
      return send(reply, internalFailure(logger, error, 'outboxWebhooks'))
    }
  }

  fastify.route({
    method: ['POST', 'GET', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
    url: options.path ?? '/',
    // Fastify answers a content-type header it cannot parse (empty, or no `type/subtype`) with its own 415 before
    // any handler runs: a content type the consumer refuses anyway is answered here, before Fastify looks at it,
    // so that refusal too gets the problem document, onError, the receipt event and the closed connection.
    onRequest: async (request, reply) => {
      if (contentTypeProblem(request.headers['content-type']) !== undefined) return answer(request, reply)
    },
    handler: answer,
  })
}
