import { randomUUID } from 'node:crypto'
import type { EventCatalog } from '@outbox/protocol'
import type { Transaction } from 'kysely'
import { invalidOption, OutboxError } from './errors.js'
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  type EnqueueInput,
  type EnqueueInputOf,
  validateEvent,
} from './event-input.js'
import { notifyChannel, resolveSchema } from './schema-name.js'
import { type EnqueuedEvent, insertEvent } from './sql/insert-event.js'
import { insertEvents } from './sql/insert-events.js'
import { recordTraceContext } from './sql/record-trace-context.js'
import { activeTraceContext } from './tracing.js'

/** Options of {@link enqueue} and {@link enqueueMany}. */
export interface EnqueueOptions {
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** NOTIFY the relay's channel so an idle relay wakes at once (collapsed to one per transaction). @defaultValue true */
  readonly notify?: boolean
  /** Largest accepted payload, in bytes of JSON. @defaultValue 262144 (256 KiB) */
  readonly maxPayloadBytes?: number
}

function assertTransaction(trx: unknown): asserts trx is Transaction<any> {
  const candidate = trx as { isTransaction?: unknown } | null
  if (typeof candidate !== 'object' || candidate === null || candidate.isTransaction !== true) {
    throw new OutboxError(
      'ERR_OUTBOX_NOT_A_TRANSACTION',
      'enqueue needs the Kysely transaction of your business write (db.transaction().execute(async (trx) => enqueue(trx, …))); a plain Kysely instance would commit the event on its own and reopen the dual-write bug',
    )
  }
}

function resolveEnqueueOptions(options: EnqueueOptions) {
  const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES
  if (!Number.isSafeInteger(maxPayloadBytes) || maxPayloadBytes <= 0) {
    throw invalidOption(
      'maxPayloadBytes',
      maxPayloadBytes,
      (name, got) => `${name('maxPayloadBytes')} must be a positive integer, got ${got}`,
    )
  }
  const schema = resolveSchema(options.schema)
  return { schema, maxPayloadBytes, channel: options.notify === false ? null : notifyChannel(schema) }
}

/**
 * Writes an event into the outbox inside YOUR transaction, so it commits or rolls back with your business change.
 *
 * The event gets the next sequence of its aggregate (`aggregateType` + `aggregateId`); writers of one aggregate
 * wait for each other until commit, so sequence order is commit order and a rollback leaves no gap. Validation
 * happens before anything is written. Under REPEATABLE READ or SERIALIZABLE a concurrent writer can make this
 * fail with 40001 (retry the transaction); enqueueing for two aggregates in opposite orders in two transactions can
 * deadlock — use {@link enqueueMany}, which locks in a fixed order.
 * With `@opentelemetry/api` installed and a span active, the span's trace context is stored with the event, and
 * the relay's delivery spans and `traceparent` header continue that trace.
 *
 * This form takes an event catalog (see `EventCatalog` in `@outbox/protocol`): a payload that does not fit its
 * `eventType`, or an event type the catalog lacks, does not compile.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { enqueue } from '@outbox/producer'
 * import type { EventCatalog } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * declare const db: Kysely<any>
 * await db.transaction().execute(async (trx) => {
 *   // payload: { order_id: '42', reason: 'duplicate' } would not compile under 'order.created'
 *   await enqueue<OrderEvents>(trx, {
 *     aggregateType: 'order',
 *     aggregateId: '42',
 *     eventType: 'order.created',
 *     payload: { order_id: '42', total_cents: 4200 },
 *   })
 * })
 * ```
 */
export function enqueue<Catalog extends EventCatalog>(
  trx: Transaction<any>,
  event: EnqueueInputOf<Catalog>,
  options?: EnqueueOptions,
): Promise<EnqueuedEvent>
/**
 * Writes an event into the outbox inside YOUR transaction, so it commits or rolls back with your business change.
 *
 * The event gets the next sequence of its aggregate (`aggregateType` + `aggregateId`); writers of one aggregate
 * wait for each other until commit, so sequence order is commit order and a rollback leaves no gap. Validation
 * happens before anything is written. Under REPEATABLE READ or SERIALIZABLE a concurrent writer can make this
 * fail with 40001 (retry the transaction); enqueueing for two aggregates in opposite orders in two transactions can
 * deadlock — use {@link enqueueMany}, which locks in a fixed order.
 * With `@opentelemetry/api` installed and a span active, the span's trace context is stored with the event, and
 * the relay's delivery spans and `traceparent` header continue that trace.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { enqueue } from '@outbox/producer'
 * declare const db: Kysely<any>
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: '42', status: 'created' }).execute()
 *   await enqueue(trx, { aggregateType: 'order', aggregateId: '42', eventType: 'order.created', payload: { id: '42' } })
 * })
 * ```
 */
export function enqueue<TPayload = unknown>(
  trx: Transaction<any>,
  event: EnqueueInput<TPayload>,
  options?: EnqueueOptions,
): Promise<EnqueuedEvent>
export async function enqueue(
  trx: Transaction<any>,
  event: EnqueueInput,
  options: EnqueueOptions = {},
): Promise<EnqueuedEvent> {
  assertTransaction(trx)
  const resolved = resolveEnqueueOptions(options)
  const validated = validateEvent(event, resolved.maxPayloadBytes)
  const traceContext = activeTraceContext()
  return await insertEvent(
    { db: trx, schema: resolved.schema },
    traceContext === null
      ? { event: validated, eventId: randomUUID(), channel: resolved.channel }
      : { event: validated, eventId: randomUUID(), channel: resolved.channel, traceContext },
  )
}

/**
 * Writes several events in your transaction; returns their ids and sequences in input order.
 *
 * Counter rows are locked in sorted key order, so two transactions enqueueing for the same aggregates in opposite
 * orders never deadlock. Events of one aggregate get consecutive sequences in the order given. All events are
 * validated before anything is written. With `@opentelemetry/api` installed and a span active, its trace context is
 * stored with every event (see {@link enqueue}).
 *
 * This form takes an event catalog (see `EventCatalog` in `@outbox/protocol`): each event's payload must fit its
 * own `eventType`.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { enqueueMany } from '@outbox/producer'
 * import type { EventCatalog } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * declare const db: Kysely<any>
 * await db.transaction().execute(async (trx) => {
 *   await enqueueMany<OrderEvents>(trx, [
 *     { aggregateType: 'order', aggregateId: '42', eventType: 'order.created', payload: { order_id: '42', total_cents: 1 } },
 *     { aggregateType: 'order', aggregateId: '42', eventType: 'order.cancelled', payload: { order_id: '42', reason: 'test' } },
 *   ])
 * })
 * ```
 */
export function enqueueMany<Catalog extends EventCatalog>(
  trx: Transaction<any>,
  events: readonly EnqueueInputOf<Catalog>[],
  options?: EnqueueOptions,
): Promise<EnqueuedEvent[]>
/**
 * Writes several events in your transaction; returns their ids and sequences in input order.
 *
 * Counter rows are locked in sorted key order, so two transactions enqueueing for the same aggregates in opposite
 * orders never deadlock. Events of one aggregate get consecutive sequences in the order given. All events are
 * validated before anything is written. With `@opentelemetry/api` installed and a span active, its trace context is
 * stored with every event (see {@link enqueue}).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { enqueueMany } from '@outbox/producer'
 * declare const db: Kysely<any>
 * await db.transaction().execute(async (trx) => {
 *   await enqueueMany(trx, [
 *     { aggregateType: 'order', aggregateId: '42', eventType: 'order.paid', payload: {} },
 *     { aggregateType: 'customer', aggregateId: '7', eventType: 'customer.charged', payload: { amount: 10 } },
 *   ])
 * })
 * ```
 */
export function enqueueMany<TPayload = unknown>(
  trx: Transaction<any>,
  events: readonly EnqueueInput<TPayload>[],
  options?: EnqueueOptions,
): Promise<EnqueuedEvent[]>
export async function enqueueMany(
  trx: Transaction<any>,
  events: readonly EnqueueInput[],
  options: EnqueueOptions = {},
): Promise<EnqueuedEvent[]> {
  assertTransaction(trx)
  const resolved = resolveEnqueueOptions(options)
  if (!Array.isArray(events)) {
    throw new OutboxError('ERR_OUTBOX_INVALID_EVENT', 'enqueueMany takes an array of events')
  }
  if (events.length === 0) return []
  const validated = events.map((event, index) => validateEvent(event, resolved.maxPayloadBytes, index))
  const ctx = { db: trx, schema: resolved.schema }
  const eventIds = validated.map(() => randomUUID())
  const enqueued = await insertEvents(ctx, { events: validated, eventIds, channel: resolved.channel })
  const traceContext = activeTraceContext()
  if (traceContext !== null) await recordTraceContext(ctx, { eventIds, traceContext })
  return enqueued
}

export type { EnqueuedEvent }
