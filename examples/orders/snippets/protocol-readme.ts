/** The code of packages/protocol/README.md, region by region: type-checked in CI, never run. */
import type { IncomingMessage } from 'node:http'

declare const rawBody: Uint8Array // the request's exact bytes
declare const req: IncomingMessage

// #region envelope
import { type OutboxEvent, parseEnvelope, serializeEnvelope } from '@outbox/protocol'

const result = parseEnvelope<{ total: number }>(rawBody) // string or Uint8Array: the exact bytes
if (!result.ok) {
  // result.code: 'malformed_json' | 'invalid_envelope'; result.errors: one message per problem
  throw new Error(`${result.code}: ${result.errors.join('; ')}`)
}
const event: OutboxEvent<{ total: number }> = result.event // camelCase: eventId, aggregateType, …

const body = serializeEnvelope(event) // the exact bytes to sign and send, fields in contract order

// #endregion envelope

// #region signatures
import { checkSignatureHeaders, parseSigningSecrets, signWebhook, verifyWebhook } from '@outbox/protocol'

const keys = parseSigningSecrets([process.env.NEW_SECRET!, process.env.OLD_SECRET!]) // 'whsec_' + ≥ 24 bytes base64
const headers = signWebhook(keys, { eventId: event.eventId, body }) // one v1 signature per key

const early = checkSignatureHeaders(req.headers) // before reading the body: a reason to refuse, or undefined
const check = verifyWebhook(keys, req.headers, rawBody) // { ok: true } or { ok: false, reason }
// #endregion signatures
console.log(headers, early, check)
