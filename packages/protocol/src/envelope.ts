import { OutboxError } from './errors.js'
import { isUuid } from './uuid.js'

/** Any value `JSON.stringify` turns into JSON and `JSON.parse` gives back unchanged. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }

/**
 * The webhook body exactly as it travels (snake_case, wire contract v1).
 *
 * `event_id` and `sequence` never change across attempts or redrives; `occurred_at` is the enqueue time.
 */
export interface WireEnvelope<TData = JsonValue> {
  readonly event_id: string
  readonly type: string
  readonly aggregate_type: string
  readonly aggregate_id: string
  readonly sequence: number
  readonly occurred_at: string
  readonly data: TData
}

/**
 * An event as application code sees it (camelCase), generic over its `data`.
 *
 * @example
 * ```ts
 * import type { OutboxEvent } from '@outbox/protocol'
 * type OrderCreated = OutboxEvent<{ order_id: string; total: number }>
 * const total = (event: OrderCreated) => event.data.total
 * ```
 */
export interface OutboxEvent<TData = JsonValue> {
  readonly eventId: string
  readonly type: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  /** ISO-8601 time of the enqueue. */
  readonly occurredAt: string
  readonly data: TData
}

/** Longest accepted `type`, `aggregate_type` or `aggregate_id`, in characters. */
export const MAX_KEY_LENGTH = 255

const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/

/** The result of {@link parseEnvelope}: the event, or every reason the body was refused. */
export type ParseEnvelopeResult<TData = JsonValue> =
  | { readonly ok: true; readonly event: OutboxEvent<TData> }
  | {
      readonly ok: false
      readonly code: 'malformed_json' | 'invalid_envelope'
      readonly errors: readonly string[]
    }

/**
 * Checks a webhook body against the wire contract and converts it to an {@link OutboxEvent}.
 *
 * Never throws: malformed JSON and every envelope problem come back as `ok: false` with one message per problem,
 * so a consumer can answer 400 with all of them at once.
 *
 * @example
 * ```ts
 * import { parseEnvelope } from '@outbox/protocol'
 * const result = parseEnvelope('{"event_id":"…"}')
 * if (!result.ok) console.error(result.errors.join('; '))
 * ```
 */
export function parseEnvelope<TData = JsonValue>(body: string | Uint8Array): ParseEnvelopeResult<TData> {
  let value: unknown
  try {
    value = JSON.parse(
      typeof body === 'string' ? body : new TextDecoder('utf-8', { fatal: true }).decode(body),
    )
  } catch {
    return { ok: false, code: 'malformed_json', errors: ['the body is not valid UTF-8 JSON'] }
  }
  return validateEnvelope<TData>(value)
}

/**
 * Validates an already-parsed value against the wire contract; see {@link parseEnvelope}.
 *
 * @example
 * ```ts
 * import { validateEnvelope } from '@outbox/protocol'
 * const result = validateEnvelope({ event_id: 'nope' })
 * // result.ok === false, result.errors lists every missing or bad field
 * ```
 */
export function validateEnvelope<TData = JsonValue>(value: unknown): ParseEnvelopeResult<TData> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { ok: false, code: 'invalid_envelope', errors: ['the body must be a JSON object'] }
  }
  const body = value as Record<string, unknown>
  const errors: string[] = []
  if (!isUuid(body.event_id)) errors.push('event_id must be a UUID string')
  for (const key of ['type', 'aggregate_type', 'aggregate_id'] as const) {
    const field = body[key]
    if (typeof field !== 'string' || field.length === 0 || field.length > MAX_KEY_LENGTH) {
      errors.push(`${key} must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`)
    }
  }
  if (typeof body.sequence !== 'number' || !Number.isSafeInteger(body.sequence) || body.sequence < 1) {
    errors.push('sequence must be a positive integer')
  }
  if (
    typeof body.occurred_at !== 'string' ||
    !ISO_TIMESTAMP.test(body.occurred_at) ||
    Number.isNaN(Date.parse(body.occurred_at))
  ) {
    errors.push('occurred_at must be an ISO-8601 timestamp')
  }
  if (!('data' in body) || body.data === undefined) errors.push('data is required (use null for no data)')
  if (errors.length > 0) return { ok: false, code: 'invalid_envelope', errors }
  return { ok: true, event: fromWireEnvelope(body as unknown as WireEnvelope<TData>) }
}

/**
 * Converts the wire form to the application form.
 *
 * @example
 * ```ts
 * import { fromWireEnvelope } from '@outbox/protocol'
 * const event = fromWireEnvelope({ event_id: 'e', type: 't', aggregate_type: 'order', aggregate_id: '1',
 *   sequence: 1, occurred_at: new Date().toISOString(), data: null })
 * ```
 */
export function fromWireEnvelope<TData>(wire: WireEnvelope<TData>): OutboxEvent<TData> {
  return {
    eventId: wire.event_id,
    type: wire.type,
    aggregateType: wire.aggregate_type,
    aggregateId: wire.aggregate_id,
    sequence: wire.sequence,
    occurredAt: wire.occurred_at,
    data: wire.data,
  }
}

/**
 * Converts an event to the wire form, in the field order of the contract.
 *
 * @example
 * ```ts
 * import { toWireEnvelope } from '@outbox/protocol'
 * const body = JSON.stringify(toWireEnvelope({ eventId: 'e', type: 't', aggregateType: 'order',
 *   aggregateId: '1', sequence: 1, occurredAt: new Date().toISOString(), data: null }))
 * ```
 */
export function toWireEnvelope<TData>(event: OutboxEvent<TData>): WireEnvelope<TData> {
  return {
    event_id: event.eventId,
    type: event.type,
    aggregate_type: event.aggregateType,
    aggregate_id: event.aggregateId,
    sequence: event.sequence,
    occurred_at: event.occurredAt,
    data: event.data,
  }
}

/**
 * Serialises an event into the exact bytes that are signed and sent. Throws {@link OutboxError}
 * `ERR_OUTBOX_INVALID_ENVELOPE` when `data` is missing or not JSON-serialisable (a bigint, a cycle).
 *
 * @example
 * ```ts
 * import { serializeEnvelope } from '@outbox/protocol'
 * const body = serializeEnvelope({ eventId: 'e', type: 't', aggregateType: 'order', aggregateId: '1',
 *   sequence: 1, occurredAt: new Date().toISOString(), data: { total: 3 } })
 * ```
 */
export function serializeEnvelope<TData>(event: OutboxEvent<TData>): string {
  // Without `data` the body would be refused as invalid_envelope on every attempt: refuse it here instead.
  if (event.data === undefined) {
    throw new OutboxError('ERR_OUTBOX_INVALID_ENVELOPE', 'the event has no data (use null for no data)')
  }
  try {
    return JSON.stringify(toWireEnvelope(event))
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    throw new OutboxError('ERR_OUTBOX_INVALID_ENVELOPE', `the event is not JSON-serialisable (${reason})`, {
      cause: error,
    })
  }
}

/**
 * Writes the wire body of an event whose `data` is already JSON text — as the outbox stores a payload and the
 * relay reads it — splicing that text in unparsed: the same bytes as {@link serializeEnvelope} of the event with
 * that JSON parsed as its `data` (byte for byte when the text is in `JSON.stringify`'s form; PostgreSQL's jsonb
 * text adds spaces, which the JSON value does not see). The other fields go through `JSON.stringify`, so the body
 * is valid JSON whenever `dataJson` is; that is not checked, since checking it is the parse this function saves on
 * every request. The one writer of the wire body besides {@link serializeEnvelope}.
 *
 * @example
 * ```ts
 * import { spliceEnvelope } from '@outbox/protocol'
 * const body = spliceEnvelope({ eventId: '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a', type: 'order.created',
 *   aggregateType: 'order', aggregateId: '42', sequence: 3, occurredAt: new Date().toISOString() },
 *   '{"total":3}')
 * ```
 */
export function spliceEnvelope(event: Omit<OutboxEvent<unknown>, 'data'>, dataJson: string): string {
  // Field order as toWireEnvelope's, so both writers give the same bytes.
  return (
    `{"event_id":${JSON.stringify(event.eventId)},"type":${JSON.stringify(event.type)},` +
    `"aggregate_type":${JSON.stringify(event.aggregateType)},"aggregate_id":${JSON.stringify(event.aggregateId)},` +
    `"sequence":${event.sequence},"occurred_at":${JSON.stringify(event.occurredAt)},"data":${dataJson}}`
  )
}
