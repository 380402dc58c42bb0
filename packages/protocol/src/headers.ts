/**
 * Header names of the wire contract, lower-case as Node exposes them.
 *
 * `x-idempotency-key` carries the event id and `x-event-sequence` the aggregate sequence (decimal); the three
 * `webhook-*` headers are Standard Webhooks 1.0 and are present only when a signing secret is configured.
 *
 * @example
 * ```ts
 * import { HEADERS } from '@outbox/protocol'
 * const eventId = new Headers({ 'x-idempotency-key': 'e1' }).get(HEADERS.idempotencyKey)
 * ```
 */
export const HEADERS = Object.freeze({
  idempotencyKey: 'x-idempotency-key',
  eventSequence: 'x-event-sequence',
  webhookId: 'webhook-id',
  webhookTimestamp: 'webhook-timestamp',
  webhookSignature: 'webhook-signature',
} as const)

/** The media type of every webhook body. */
export const CONTENT_TYPE_JSON = 'application/json'

/** The media type of every error answer (RFC 9457). */
export const CONTENT_TYPE_PROBLEM = 'application/problem+json'
