import { type EventCatalog, type EventTypeOf, MAX_KEY_LENGTH } from '@outbox/protocol'
import { OutboxError } from './errors.js'
import { jsonbTextBytes } from './jsonb-size.js'

/**
 * An event to enqueue. `payload` becomes the webhook's `data`. `TType` narrows `eventType`; with a catalog, use
 * {@link EnqueueInputOf}, which pairs each event type with its payload.
 *
 * @example
 * ```ts
 * import type { EnqueueInput } from '@outbox/producer'
 * const placed: EnqueueInput<{ order_id: string }> = {
 *   aggregateType: 'order',
 *   aggregateId: '42',
 *   eventType: 'order.placed',
 *   payload: { order_id: '42' },
 * }
 * ```
 */
export interface EnqueueInput<TPayload = unknown, TType extends string = string> {
  /** The aggregate's kind, e.g. `'order'`. With `aggregateId` it keys order: one lane, one sequence. */
  readonly aggregateType: string
  /** The aggregate's id, e.g. `'42'` — a string, so big ids and UUIDs survive unchanged. */
  readonly aggregateId: string
  /** The event's name, e.g. `'order.created'`. */
  readonly eventType: TType
  /** Any JSON-serialisable value. */
  readonly payload: TPayload
  /**
   * The tenant the event belongs to, e.g. a customer account id. A subscription created with a `tenant` receives
   * only that tenant's events; one without receives every event. Omit for events no tenant owns.
   */
  readonly tenant?: string
}

/**
 * An event to enqueue under a catalog: the union, over the catalog's event types, of inputs whose `payload` is
 * that type's payload — so `{ eventType: 'order.created', payload: <an order.cancelled payload> }` is a compile
 * error. For `UntypedCatalog` it is `EnqueueInput` of any JSON value.
 *
 * @example
 * ```ts
 * import type { EnqueueInputOf } from '@outbox/producer'
 * import type { EventCatalog } from '@outbox/protocol'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * const events: EnqueueInputOf<OrderEvents>[] = [
 *   { aggregateType: 'order', aggregateId: '42', eventType: 'order.created', payload: { order_id: '42', total_cents: 4200 } },
 *   { aggregateType: 'order', aggregateId: '42', eventType: 'order.cancelled', payload: { order_id: '42', reason: 'duplicate' } },
 * ]
 * ```
 */
export type EnqueueInputOf<Catalog extends EventCatalog> =
  string extends EventTypeOf<Catalog>
    ? EnqueueInput<Catalog[string & keyof Catalog]>
    : { [Type in EventTypeOf<Catalog>]: EnqueueInput<Catalog[Type], Type> }[EventTypeOf<Catalog>]

/** An input that passed validation, its payload already serialised. */
export interface ValidatedEvent {
  readonly aggregateType: string
  readonly aggregateId: string
  readonly eventType: string
  readonly payloadJson: string
  /** The payload's size as the relay sends it (jsonb's text form), which is what `maxPayloadBytes` limits. */
  readonly payloadBytes: number
  /** Null when the event has no tenant. */
  readonly tenant: string | null
}

/** The largest payload enqueue accepts by default: below the consumer's 1 MB so every event can be delivered. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024

function checkKey(value: unknown, field: string, where: string): string {
  if (typeof value !== 'string') {
    const hint = typeof value === 'number' ? ` (use String(${field}))` : ''
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_EVENT',
      `${where}${field} must be a string, got ${typeof value}${hint}`,
    )
  }
  if (value.length === 0 || value.trim().length === 0) {
    throw new OutboxError('ERR_OUTBOX_INVALID_EVENT', `${where}${field} must not be empty`)
  }
  if (value.length > MAX_KEY_LENGTH) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_EVENT',
      `${where}${field} is ${value.length} characters; the limit is ${MAX_KEY_LENGTH}`,
    )
  }
  // PostgreSQL text refuses NUL (the error would abort the caller's transaction), and a lone surrogate would be
  // silently replaced by U+FFFD on the way in, changing the aggregate key.
  if (value.includes('\u0000')) {
    throw new OutboxError('ERR_OUTBOX_INVALID_EVENT', `${where}${field} contains a NUL character (\\u0000)`)
  }
  if (LONE_SURROGATE.test(value)) {
    throw new OutboxError('ERR_OUTBOX_INVALID_EVENT', `${where}${field} contains a lone UTF-16 surrogate`)
  }
  return value
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

// JSON.stringify writes NUL and lone surrogates as \u escapes (valid pairs stay raw characters); jsonb refuses
// both. The lookbehind skips an escaped backslash followed by the letters "u0000", which is ordinary text.
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(0000|d[89a-f][0-9a-f]{2})/

function serialisePayload(payload: unknown, where: string): string {
  let json: string | undefined
  try {
    json = JSON.stringify(payload)
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      `${where}payload is not JSON-serialisable (${reason}); convert bigints to strings and remove cycles`,
      { cause: error },
    )
  }
  if (json === undefined) {
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      `${where}payload is ${typeof payload}, which JSON cannot represent; pass an object, array, string, number, boolean or null`,
    )
  }
  // Say so here rather than as a database error that aborts the caller's transaction.
  const unstorable = UNSTORABLE_ESCAPE.exec(json)
  if (unstorable) {
    const what =
      unstorable[1] === '0000' ? 'a NUL character (\\u0000)' : `a lone UTF-16 surrogate (\\u${unstorable[1]})`
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      `${where}payload contains ${what}, which PostgreSQL jsonb cannot store`,
    )
  }
  return json
}

/**
 * Validates one event before anything is written, with messages that say what to change.
 * `index` names the event's position in an `enqueueMany` call.
 */
export function validateEvent(input: EnqueueInput, maxPayloadBytes: number, index?: number): ValidatedEvent {
  const where = index === undefined ? '' : `events[${index}].`
  if (typeof input !== 'object' || input === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_EVENT',
      `${where || 'event '}must be an object with aggregateType, aggregateId, eventType and payload`,
    )
  }
  const aggregateType = checkKey(input.aggregateType, 'aggregateType', where)
  const aggregateId = checkKey(input.aggregateId, 'aggregateId', where)
  const eventType = checkKey(input.eventType, 'eventType', where)
  const payloadJson = serialisePayload(input.payload, where)
  // Measured as the relay will send it: PostgreSQL prints the stored jsonb with spaces after separators and numbers
  // in full, so `JSON.stringify`'s length can be far below the body's (1e300 takes 301 bytes on the wire).
  const payloadBytes = jsonbTextBytes(payloadJson)
  if (payloadBytes > maxPayloadBytes) {
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      `${where}payload is ${payloadBytes} bytes as sent (its JSON as PostgreSQL prints it); the limit is ${maxPayloadBytes} (store large data elsewhere and send a reference, or raise maxPayloadBytes below the consumer's limit)`,
    )
  }
  const tenant = input.tenant === undefined ? null : checkKey(input.tenant, 'tenant', where)
  return { aggregateType, aggregateId, eventType, payloadJson, payloadBytes, tenant }
}
