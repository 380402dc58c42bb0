import type { JsonValue, OutboxEvent } from './envelope.js'
import type { ReceivedEvent } from './received-event.js'

/**
 * An event catalog: each event type a stream carries, mapped to the type of its `data`. Declared once, in code the
 * producer and its subscribers share, it types both ends: `enqueue` refuses at compile time a payload that does not
 * fit its `eventType`, and `createConsumer<DB, Catalog>` hands the handler an event whose `data` narrows by
 * `event.type`, with no cast.
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
export type EventCatalog = { readonly [eventType: string]: unknown }

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
export type UntypedCatalog = { readonly [eventType: string]: JsonValue }

/** The catalog's event types, as a union of string literals. */
export type EventTypeOf<Catalog extends EventCatalog> = keyof Catalog & string

/**
 * The events of a catalog as one discriminated union on `type`: `if (event.type === 'order.created')` narrows
 * `event.data` to that type's payload.
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
    ? OutboxEvent<Catalog[string]>
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
    ? ReceivedEvent<Catalog[string]>
    : {
        [Type in EventTypeOf<Catalog>]: ReceivedEvent<Catalog[Type]> & { readonly type: Type }
      }[EventTypeOf<Catalog>]
