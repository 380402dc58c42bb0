/**
 * Sending one webhook without the producer, as packages/protocol/README.md shows it: type-checked in CI, and run by
 * test/e2e/protocol-readme.test.ts against a real consumer, so the request it builds is one the consumer accepts.
 *
 *   OUTBOX_ENDPOINT=http://127.0.0.1:3000/hooks OUTBOX_SECRET=whsec_… node --import tsx protocol-send.ts
 */
// #region send
import { randomUUID } from 'node:crypto'
import {
  CONTENT_TYPE_JSON,
  HEADERS,
  type OutboxEvent,
  parseSigningSecrets,
  serializeEnvelope,
  signWebhook,
} from '@outbox/protocol'

// 'whsec_' + ≥ 24 bytes base64; while rotating 'whsec_new,whsec_old' (as `outbox relay` reads it): one signature each
const keys = parseSigningSecrets((process.env.OUTBOX_SECRET ?? '').split(','))
const event: OutboxEvent<{ total: number }> = {
  eventId: randomUUID(), // keep it for every retry of this event: the receiver dedupes on it
  type: 'order.created',
  aggregateType: 'order',
  aggregateId: '42',
  sequence: 1, // 1, 2, 3, … per aggregate: the receiver applies an aggregate's events in this order
  occurredAt: new Date().toISOString(),
  data: { total: 3 },
}
const body = serializeEnvelope(event) // the exact bytes to sign and to send

const response = await fetch(process.env.OUTBOX_ENDPOINT ?? 'http://127.0.0.1:3000/hooks', {
  method: 'POST',
  headers: {
    'content-type': CONTENT_TYPE_JSON,
    [HEADERS.idempotencyKey]: event.eventId, // x-idempotency-key: required, equal to event_id
    [HEADERS.eventSequence]: String(event.sequence), // x-event-sequence: required, equal to sequence
    ...signWebhook(keys, { eventId: event.eventId, body }), // webhook-id, webhook-timestamp, webhook-signature
  },
  body,
})
// 200 {"status":"applied",…} (duplicate_ignored or stale_ignored: seen already); else a problem+json saying why.
console.log(response.status, await response.text())
// #endregion send
