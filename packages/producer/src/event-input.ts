import { MAX_KEY_LENGTH } from '@outbox/protocol'
import { OutboxError } from './errors.js'

/** An event to enqueue. `payload` becomes the webhook's `data`. */
export interface EnqueueInput<TPayload = unknown> {
  /** The aggregate's kind, e.g. `'order'`. With `aggregateId` it keys order: one lane, one sequence. */
  readonly aggregateType: string
  /** The aggregate's id, e.g. `'42'` — a string, so big ids and UUIDs survive unchanged. */
  readonly aggregateId: string
  /** The event's name, e.g. `'order.created'`. */
  readonly eventType: string
  /** Any JSON-serialisable value. */
  readonly payload: TPayload
}

/** An input that passed validation, its payload already serialised. */
export interface ValidatedEvent {
  readonly aggregateType: string
  readonly aggregateId: string
  readonly eventType: string
  readonly payloadJson: string
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
  return value
}

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
  // jsonb refuses the NUL character; say so here rather than as a database error mid-transaction.
  if (json.includes('\\u0000')) {
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      `${where}payload contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store`,
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
  const bytes = Buffer.byteLength(payloadJson)
  if (bytes > maxPayloadBytes) {
    throw new OutboxError(
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      `${where}payload is ${bytes} bytes of JSON; the limit is ${maxPayloadBytes} (store large data elsewhere and send a reference, or raise maxPayloadBytes below the consumer's limit)`,
    )
  }
  return { aggregateType, aggregateId, eventType, payloadJson }
}
