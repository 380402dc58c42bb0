import { HEADERS, MAX_KEY_LENGTH, type ReceivedEvent, validateEnvelope } from '@outbox/protocol'
import type { WebhookHeaders } from './headers.js'

/**
 * An envelope reader's "this is not an event": every reason, answered 400 with `code` (`invalid_envelope` unless
 * said otherwise), nothing recorded. `event` is what could be read, for the log line.
 *
 * @example
 * ```ts
 * import type { EnvelopeRefusal } from '@outbox/consumer'
 * const refused: EnvelopeRefusal = { errors: ['id is missing'] }
 * ```
 */
export interface EnvelopeRefusal {
  readonly errors: readonly string[]
  /** @defaultValue 'invalid_envelope' */
  readonly code?: 'invalid_envelope' | 'idempotency_key_mismatch' | 'sequence_header_mismatch'
  readonly event?: ReceivedEvent<unknown>
}

/**
 * What an {@link EnvelopeReader} gives back: the event, or an {@link EnvelopeRefusal}.
 *
 * @example
 * ```ts
 * import type { EnvelopeResult } from '@outbox/consumer'
 * const refused: EnvelopeResult = { errors: ['id is missing'] }
 * ```
 */
export type EnvelopeResult = ReceivedEvent<unknown> | EnvelopeRefusal

/**
 * Turns a sender's parsed JSON body (and its headers) into the event the consumer records: the `envelope` option of
 * `createConsumer`, for webhooks that are not this project's. It runs after the signature was verified.
 * `eventId` is what duplicates are recognised by (per consumer `source`): take the sender's delivery-independent
 * event id — Stripe's `id`, GitHub's `X-GitHub-Delivery`, Standard Webhooks' `webhook-id`. A sender without
 * aggregates or sequence numbers runs under `sequence: 'off'`.
 *
 * Shipped: `stripeEnvelope`, `githubEnvelope` and `standardWebhooksEnvelope`.
 *
 * @example
 * ```ts
 * import type { EnvelopeReader } from '@outbox/consumer'
 *
 * const envelope: EnvelopeReader = (body, headers) => {
 *   const { kind, payload } = body as { kind?: unknown; payload?: unknown }
 *   const id = headers.get('x-delivery-id')
 *   if (typeof kind !== 'string' || id === undefined) return { errors: ['kind and x-delivery-id are required'] }
 *   return { eventId: id, type: kind, data: payload }
 * }
 * ```
 */
export type EnvelopeReader = (body: unknown, headers: WebhookHeaders) => EnvelopeResult

/** Whether a reader's result is a refusal. */
export function isEnvelopeRefusal(result: EnvelopeResult): result is EnvelopeRefusal {
  return Array.isArray((result as { errors?: unknown }).errors)
}

/**
 * Checks what a custom reader returned, so a reader's slip (no id, a sequence of 0, a NUL character PostgreSQL
 * cannot store) is a clear 400 and never a database error answered 500 and retried forever.
 */
export function checkReceivedEvent(event: unknown): readonly string[] {
  const errors: string[] = []
  if (typeof event !== 'object' || event === null) return ['the envelope reader returned no event']
  const e = event as Record<string, unknown>
  const text = (field: string, required: boolean) => {
    const value = e[field]
    if (value === undefined && !required) return
    if (typeof value !== 'string' || value.length === 0 || value.length > MAX_KEY_LENGTH) {
      errors.push(`${field} must be a string of 1 to ${MAX_KEY_LENGTH} characters`)
    } else if (value.includes('\u0000')) {
      errors.push(`${field} must not contain the NUL character (U+0000)`)
    }
  }
  text('eventId', true)
  text('type', true)
  text('aggregateType', false)
  text('aggregateId', false)
  if (e.sequence !== undefined && (!Number.isSafeInteger(e.sequence) || (e.sequence as number) < 1)) {
    errors.push('sequence must be a positive whole number')
  }
  if ((e.aggregateType === undefined) !== (e.aggregateId === undefined)) {
    errors.push('aggregateType and aggregateId come together: give both or neither')
  }
  return errors
}

/**
 * This project's envelope (wire contract v1): the body is checked against the contract, and the headers must
 * repeat its id (`x-idempotency-key`, and `webhook-id` when signed) and its sequence (`x-event-sequence`) — a
 * proxy or a bug that mixes bodies and headers up is caught before anything is recorded.
 */
export function outboxEnvelope(signed: boolean): EnvelopeReader {
  return (body, headers) => {
    const parsed = validateEnvelope<unknown>(body)
    if (!parsed.ok) return { errors: parsed.errors }
    const event = parsed.event
    if (`${event.type}${event.aggregateType}${event.aggregateId}`.includes('\u0000')) {
      const keys = { type: event.type, aggregate_type: event.aggregateType, aggregate_id: event.aggregateId }
      return {
        errors: Object.entries(keys)
          .filter(([, value]) => value.includes('\u0000'))
          .map(([field]) => `${field} must not contain the NUL character (U+0000)`),
      }
    }
    const key = headers.get(HEADERS.idempotencyKey)
    if (key === undefined || key.toLowerCase() !== event.eventId.toLowerCase()) {
      const error =
        key === undefined
          ? 'the x-idempotency-key header is required'
          : 'x-idempotency-key must equal event_id'
      return { code: 'idempotency_key_mismatch', errors: [error], event }
    }
    if (signed && headers.get(HEADERS.webhookId)?.toLowerCase() !== event.eventId.toLowerCase()) {
      return { code: 'idempotency_key_mismatch', errors: ['webhook-id must equal event_id'], event }
    }
    const sequence = headers.get(HEADERS.eventSequence)
    if (sequence === undefined || !/^\d{1,16}$/.test(sequence) || Number(sequence) !== event.sequence) {
      const error =
        sequence === undefined
          ? 'the x-event-sequence header is required'
          : 'x-event-sequence must equal sequence'
      return { code: 'sequence_header_mismatch', errors: [error], event }
    }
    return event
  }
}
