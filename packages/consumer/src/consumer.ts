import type { IncomingMessage, ServerResponse } from 'node:http'
import { type EventCatalog, EventHub, type JsonValue, type UntypedCatalog } from '@outbox/protocol'
import { type ExpressMiddleware, expressAdapter } from './adapters/express.js'
import { fetchAdapter } from './adapters/fetch.js'
import { nodeAdapter } from './adapters/node.js'
import { createBodyGate } from './core/body-gate.js'
import type { EnvelopeReader } from './core/envelope-reader.js'
import { CORE, type ConsumerCore } from './core/internal.js'
import { createReceive, type WebhookRequest } from './core/receive.js'
import { OutboxError } from './errors.js'
import type { createPool, guardPool } from './guard-pool.js'
import type { EnvelopeKind, ExpressRequest, HandlerEvent, ReceiptHandler } from './handler.js'
import { type ConsumerOptions, type ErrorListener, resolveConsumerOptions } from './options.js'
import type { ReceiptEventMap, ReceiptListener } from './receipt-events.js'
import type { WebhookResponse } from './respond.js'

/**
 * Per-adapter options: an `onError` typed with that adapter's own request, called after the consumer's.
 *
 * @example
 * ```ts
 * import type { AdapterOptions } from '@outbox/consumer'
 * const options: AdapterOptions<Request> = { onError: (refused, req) => console.warn(refused.code, req.url) }
 * ```
 */
export interface AdapterOptions<TReq> {
  readonly onError?: ErrorListener<TReq>
}

/**
 * What {@link createConsumer} returns: one framework-free core (`handle`) and adapters over it for Express
 * (`dedupe`), web-standard servers (`fetch`) and `node:http` (`node`) — the Fastify plugin is in
 * `@outbox/consumer/fastify` — plus the `receipt:*` events. Every adapter runs the same checks, transaction and
 * answers; only the request and response types differ.
 *
 * `Catalog` (an {@link EventCatalog}) types every handler's event as a union narrowing `data` by `type`; without
 * one, each handler takes its own `TData` as before.
 *
 * @example
 * ```ts
 * import { type Consumer, createConsumer, createPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const consumer: Consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * const onEvent = consumer.dedupe(async (event) => console.log(event.type, event.sequence))
 * ```
 */
export interface Consumer<
  DB = any,
  Catalog extends EventCatalog = UntypedCatalog,
  Kind extends EnvelopeKind = 'outbox',
> {
  /**
   * The framework-free core: a function from a {@link WebhookRequest} (`method`, headers as a record or web
   * `Headers`, body as bytes or a stream the core reads) to a {@link WebhookResponse} (`status`, `headers`,
   * `body`, `closeConnection`) for any server to write. Write `closeConnection` as closing the connection.
   */
  handle<TData = JsonValue>(
    handler: ReceiptHandler<HandlerEvent<Catalog, TData, Kind>, DB, WebhookRequest>,
    options?: AdapterOptions<WebhookRequest>,
  ): (request: WebhookRequest) => Promise<WebhookResponse>
  /**
   * Express 4 or 5: `app.post('/hooks', consumer.dedupe(handler))`, with nothing that parses the body in front of
   * it — or `express.raw({ type: 'application/json' })`, whose `Buffer` it takes as the raw bytes.
   */
  dedupe<TData = JsonValue>(
    handler: ReceiptHandler<HandlerEvent<Catalog, TData, Kind>, DB, ExpressRequest>,
    options?: AdapterOptions<ExpressRequest>,
  ): ExpressMiddleware
  /** Web standard: `(request: Request) => Promise<Response>` for Hono, Next.js route handlers, Bun and Deno. */
  fetch<TData = JsonValue>(
    handler: ReceiptHandler<HandlerEvent<Catalog, TData, Kind>, DB, Request>,
    options?: AdapterOptions<Request>,
  ): (request: Request) => Promise<Response>
  /** `node:http`: `(req, res) => void` for `http.createServer(…)`. */
  node<TData = JsonValue>(
    handler: ReceiptHandler<HandlerEvent<Catalog, TData, Kind>, DB, IncomingMessage>,
    options?: AdapterOptions<IncomingMessage>,
  ): (req: IncomingMessage, res: ServerResponse) => void
  /** Adds a listener of a `receipt:*` event; returns a function that removes it. */
  on<K extends keyof ReceiptEventMap>(name: K, listener: ReceiptListener<K>): () => void
  /** Adds a listener called at most once. */
  once<K extends keyof ReceiptEventMap>(name: K, listener: ReceiptListener<K>): () => void
  /** Removes a listener. */
  off<K extends keyof ReceiptEventMap>(name: K, listener: ReceiptListener<K>): void
}

function checkHandler(handler: unknown, method: string): void {
  if (typeof handler !== 'function') {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `${method}: pass the handler, e.g. ${method}(async (event, trx, req) => { … })`,
      { option: 'handler' },
    )
  }
}

function checkAdapterOptions(options: AdapterOptions<unknown> | undefined, method: string): void {
  if (options === undefined) return
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError('ERR_OUTBOX_INVALID_OPTION', `${method}: the second argument is { onError }`)
  }
  for (const key of Object.keys(options)) {
    if (key !== 'onError') {
      throw new OutboxError(
        'ERR_OUTBOX_INVALID_OPTION',
        `${method}: unknown option \`${key}\`; known: onError`,
        {
          option: key,
        },
      )
    }
  }
  if (options.onError !== undefined && typeof options.onError !== 'function') {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `${method}: \`onError\` must be a function (refusal, req) => void`,
      {
        option: 'onError',
      },
    )
  }
}

/**
 * Creates a consumer: checks the options once and returns the core and its adapters, which turn an at-least-once
 * webhook stream into effects applied exactly once and, per aggregate, in sequence order.
 *
 * For each request, in this order: method POST (405); content type (415) and announced size (413) on the headers
 * alone; the signature headers (401) — all before a byte of the body is read, and such a refusal closes the
 * connection; the body up to `maxBodyBytes` (413); the signature over the exact bytes (401); JSON, envelope and
 * the id/sequence headers (400); the payload schema if any (422). Then, in ONE transaction: record the event id
 * under the consumer's `source` (a duplicate answers `200 duplicate_ignored`), lock and judge the aggregate's
 * cursor (`stale_ignored`, or 409 under `'strict'`), run the handler: `200 applied`. If the handler or the
 * database fails, everything rolls back and the answer is 500 `handler_failed`, with no internals, so the sender
 * retries. A client's mistake never gets a 5xx; `onError`, the logger and the `receipt:*` events see every
 * outcome.
 *
 * Create the pool behind `db` with {@link createPool} (or pass it through {@link guardPool}): a bare `pg.Pool`
 * lets a PostgreSQL connection cut while a handler runs (a restart, a failover) crash the process. Kysely keeps its
 * dialect's pool private, so the consumer cannot check the pool itself; it warns when a PostgreSQL `db` is given in
 * a process that has guarded no pool at all.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import express from 'express'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const { dedupe } = createConsumer({ db, secret: process.env.OUTBOX_SECRET, sequence: 'monotonic' })
 *
 * const app = express()
 * app.post(
 *   '/hooks',
 *   dedupe<{ order_id: string; status: string }>(async (event, trx) => {
 *     await trx.updateTable('orders').set({ status: event.data.status }).where('id', '=', event.data.order_id).execute()
 *   }),
 * )
 * app.use(express.json()) // parsers for other routes go after
 * ```
 */
export function createConsumer<DB = any, Catalog extends EventCatalog = UntypedCatalog>(
  options: ConsumerOptions<DB, Catalog> & { readonly envelope: EnvelopeReader },
): Consumer<DB, Catalog, 'received'>
export function createConsumer<DB = any, Catalog extends EventCatalog = UntypedCatalog>(
  options: ConsumerOptions<DB, Catalog>,
): Consumer<DB, Catalog, 'outbox'>
export function createConsumer(options: ConsumerOptions<any>): Consumer<any, UntypedCatalog, EnvelopeKind> {
  const resolved = resolveConsumerOptions(options)
  const { logger } = resolved
  const hub = new EventHub<ReceiptEventMap>(logger, 'consumer')
  const bodies = createBodyGate(resolved.maxConcurrentBodies, resolved.largeBodyBytesPerSecond)
  const receive = createReceive(resolved, hub, bodies)
  const core: ConsumerCore = Object.freeze({ receive, logger, bodies })

  const consumer: Consumer<any, UntypedCatalog, EnvelopeKind> & { readonly [CORE]: ConsumerCore } = {
    [CORE]: core,
    handle(handler, adapterOptions) {
      checkHandler(handler, 'handle')
      checkAdapterOptions(adapterOptions, 'handle')
      const onError = adapterOptions?.onError
      return (request) => receive(request, { context: request, handler, onError })
    },
    dedupe(handler, adapterOptions) {
      checkHandler(handler, 'dedupe')
      checkAdapterOptions(adapterOptions, 'dedupe')
      return expressAdapter(receive, logger, { handler, onError: adapterOptions?.onError })
    },
    fetch(handler, adapterOptions) {
      checkHandler(handler, 'fetch')
      checkAdapterOptions(adapterOptions, 'fetch')
      return fetchAdapter(receive, logger, { handler, onError: adapterOptions?.onError })
    },
    node(handler, adapterOptions) {
      checkHandler(handler, 'node')
      checkAdapterOptions(adapterOptions, 'node')
      return nodeAdapter(receive, logger, { handler, onError: adapterOptions?.onError })
    },
    on: (name, listener) => hub.on(name, listener),
    once: (name, listener) => hub.once(name, listener),
    off: (name, listener) => hub.off(name, listener),
  }
  return Object.freeze(consumer)
}
