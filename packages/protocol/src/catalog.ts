import type { JsonValue, OutboxEvent } from './envelope.js'
import type { ReceivedEvent } from './received-event.js'

// Types only: no value exists at run time. An optional property keyed by a symbol nobody else can name gives
// EventCatalog a member without giving it an index signature — an index signature would be inherited by every
// `interface … extends EventCatalog`, putting `string` among its keys, and then `type` would narrow nothing.
declare const catalogMarker: unique symbol

/**
 * An event catalog: each event type a stream carries, mapped to the type of its `data`. Declared once, in code the
 * producer and its subscribers share, it types both ends: `enqueue<Catalog>` refuses at compile time a payload that
 * does not fit its `eventType`, and `createConsumer<DB, Catalog>` hands the handler an event whose `data` narrows
 * by `event.type`, with no cast.
 *
 * Declare a catalog as an interface that extends this one. Its keys are the event types; nothing else belongs in
 * it. A catalog is a compile-time promise only: pair it with the consumer's `schemas` option to check payloads at
 * run time.
 *
 * @example
 * ```ts
 * import type { EventCatalog } from '@outbox/protocol'
 *
 * export interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * ```
 */
export interface EventCatalog {
  readonly [catalogMarker]?: never
}

/**
 * The catalog of a stream nobody has typed: any event type, any JSON `data`. The default of every catalog
 * parameter, so code written before catalogs existed keeps its single-type generics.
 *
 * @example
 * ```ts
 * import type { EventOf, UntypedCatalog } from '@outbox/protocol'
 * type AnyEvent = EventOf<UntypedCatalog> // OutboxEvent<JsonValue>
 * ```
 */
export interface UntypedCatalog extends EventCatalog {
  readonly [eventType: string]: JsonValue
}

/**
 * The catalog's event types, as a union of string literals (`string` for {@link UntypedCatalog}).
 *
 * @example
 * ```ts
 * import type { EventCatalog, EventTypeOf } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * const types: EventTypeOf<OrderEvents>[] = ['order.created', 'order.cancelled']
 * ```
 */
export type EventTypeOf<Catalog extends EventCatalog> = Exclude<keyof Catalog, typeof catalogMarker> & string

/**
 * The payload (`data`) of one event type of a catalog.
 *
 * @example
 * ```ts
 * import type { EventCatalog, PayloadOf } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 * }
 * const created: PayloadOf<OrderEvents, 'order.created'> = { order_id: '42', total_cents: 1999 }
 * ```
 */
export type PayloadOf<Catalog extends EventCatalog, Type extends EventTypeOf<Catalog>> = Catalog[Type]

/**
 * The events of a catalog as one discriminated union on `type`: `if (event.type === 'order.created')` narrows
 * `event.data` to that type's payload. For {@link UntypedCatalog} (or any catalog keyed by `string`) it is
 * `OutboxEvent` of the catalog's value type, with nothing to narrow.
 *
 * @example
 * ```ts
 * import type { EventCatalog, EventOf } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * const describe = (event: EventOf<OrderEvents>) =>
 *   event.type === 'order.created' ? `${event.data.total_cents} cents` : event.data.reason
 * ```
 */
export type EventOf<Catalog extends EventCatalog> =
  string extends EventTypeOf<Catalog>
    ? OutboxEvent<Catalog[string & keyof Catalog]>
    : {
        [Type in EventTypeOf<Catalog>]: OutboxEvent<Catalog[Type]> & { readonly type: Type }
      }[EventTypeOf<Catalog>]

/**
 * The events of a catalog as another sender delivers them: {@link EventOf} over `ReceivedEvent` (aggregate,
 * sequence and time optional), narrowing `data` by `type` the same way.
 *
 * @example
 * ```ts
 * import type { EventCatalog, ReceivedEventOf } from '@outbox/protocol'
 *
 * interface StripeEvents extends EventCatalog {
 *   'invoice.paid': { object: { id: string; amount_paid: number } }
 * }
 * const amount = (event: ReceivedEventOf<StripeEvents>) => event.data.object.amount_paid
 * ```
 */
export type ReceivedEventOf<Catalog extends EventCatalog> =
  string extends EventTypeOf<Catalog>
    ? ReceivedEvent<Catalog[string & keyof Catalog]>
    : {
        [Type in EventTypeOf<Catalog>]: ReceivedEvent<Catalog[Type]> & { readonly type: Type }
      }[EventTypeOf<Catalog>]
