/**
 * The events the orders service publishes: the contract between it and every subscriber. Each event's
 * aggregate is the order (`aggregateType: 'order'`, `aggregateId`: the order id), so one order's events
 * arrive in the order they were committed.
 */
import type { EventCatalog } from '@outbox/protocol'

/** An order's life, in order. */
export const ORDER_STATUSES = ['placed', 'paid', 'packed', 'shipped', 'delivered', 'cancelled'] as const

/** One of {@link ORDER_STATUSES}. */
export type OrderStatus = (typeof ORDER_STATUSES)[number]

/** `order.created`: a new order, in status `placed`. */
export interface OrderCreated {
  readonly orderId: string
  readonly customer: string
  readonly totalCents: number
  readonly status: OrderStatus
}

/** `order.updated`: the order's status changed. */
export interface OrderUpdated {
  readonly orderId: string
  readonly status: OrderStatus
}

/**
 * Event type → payload (the webhook's `data`): the catalog both sides are typed by. The orders service's
 * `enqueue<OrderEvents>` refuses a payload that does not fit its event type at compile time; the subscriber's
 * `createConsumer<Db, OrderEvents>` narrows `event.data` by `event.type`.
 */
export interface OrderEvents extends EventCatalog {
  'order.created': OrderCreated
  'order.updated': OrderUpdated
}

/** Whether `value` names a known status (request bodies are untrusted). */
export function isOrderStatus(value: unknown): value is OrderStatus {
  return typeof value === 'string' && (ORDER_STATUSES as readonly string[]).includes(value)
}
