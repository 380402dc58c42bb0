import type { IncomingMessage } from 'node:http'
import type {
  EventCatalog,
  EventOf,
  EventTypeOf,
  JsonValue,
  OutboxEvent,
  ReceivedEvent,
  ReceivedEventOf,
} from '@outbox/protocol'
import type { Transaction } from 'kysely'

/**
 * Which envelope a consumer reads, for typing its events: `'outbox'` (this project's relay: every field present)
 * or `'received'` (a custom `envelope`: aggregate, sequence and time may be missing).
 */
export type EnvelopeKind = 'outbox' | 'received'

/**
 * The event a handler gets. With a catalog (`createConsumer<DB, Catalog>`), the union of its events, narrowing
 * `data` by `type`; without one, `OutboxEvent<TData>` (or `ReceivedEvent<TData>` for a custom envelope), `TData`
 * given per handler and not checked at run time (unless `schemas` checks it).
 *
 * @example
 * ```ts
 * import type { HandlerEvent } from '@outbox/consumer'
 * import type { EventCatalog } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string }
 * }
 * type Created = HandlerEvent<OrderEvents> // OutboxEvent<{ order_id: string }> & { type: 'order.created' }
 * ```
 */
export type HandlerEvent<
  Catalog extends EventCatalog,
  TData = JsonValue,
  Kind extends EnvelopeKind = 'outbox',
> =
  string extends EventTypeOf<Catalog>
    ? Kind extends 'received'
      ? ReceivedEvent<TData>
      : OutboxEvent<TData>
    : Kind extends 'received'
      ? ReceivedEventOf<Catalog>
      : EventOf<Catalog>

/**
 * The application's code for one event, given to `consumer.handle` or an adapter (`dedupe`, `fetch`, `node`, the
 * Fastify plugin).
 *
 * It runs inside the transaction that records the event id, so its writes on `trx` commit together with that
 * record or not at all: an effect is applied at most once, and — because a failure answers 500 and the sender
 * retries — at least once. Throw to refuse the event; never answer the request yourself. `req` is the adapter's
 * own request (core `WebhookRequest`, web `Request`, `IncomingMessage`, `FastifyRequest`, Express `Request`). The
 * aggregate's cursor row is locked by `trx` and already shows `event.sequence` while the handler runs. Declared
 * as a method, so a handler whose `req` is typed with the framework's own request type is accepted.
 *
 * @example
 * ```ts
 * import type { ReceiptHandler } from '@outbox/consumer'
 * import type { OutboxEvent } from '@outbox/protocol'
 *
 * interface Database {
 *   orders: { id: string; status: string }
 * }
 * const onOrder: ReceiptHandler<OutboxEvent<{ order_id: string; status: string }>, Database, Request> = async (
 *   event,
 *   trx,
 * ) => {
 *   await trx.updateTable('orders').set({ status: event.data.status }).where('id', '=', event.data.order_id).execute()
 * }
 * ```
 */
export type ReceiptHandler<TEvent, DB = any, TReq = unknown> = {
  bivarianceHack(event: TEvent, trx: Transaction<DB>, req: TReq): unknown
}['bivarianceHack']

/**
 * The Express request as the consumer needs it: Node's `IncomingMessage` with the `body` a parser may have left.
 * Structural, so the consumer's types need nothing of Express installed; a handler may still type `req` as
 * Express's own `Request`.
 *
 * @example
 * ```ts
 * import type { ExpressRequest } from '@outbox/consumer'
 * const raw = (req: ExpressRequest) => Buffer.isBuffer(req.body)
 * ```
 */
export type ExpressRequest = IncomingMessage & { body?: unknown }

/**
 * The handler of `dedupe`, as before adapters existed: an `OutboxEvent<TData>` and the Express request.
 *
 * @example
 * ```ts
 * import type { DedupeHandler } from '@outbox/consumer'
 *
 * interface Database {
 *   orders: { id: string; status: string }
 * }
 * const onOrderEvent: DedupeHandler<{ order_id: string; status: string }, Database> = async (event, trx) => {
 *   await trx.updateTable('orders').set({ status: event.data.status }).where('id', '=', event.data.order_id).execute()
 * }
 * ```
 */
export type DedupeHandler<TData = unknown, DB = any> = ReceiptHandler<OutboxEvent<TData>, DB, ExpressRequest>
