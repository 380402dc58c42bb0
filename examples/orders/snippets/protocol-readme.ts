/**
 * The receiving code of packages/protocol/README.md, region by region: type-checked in CI, never run (the sending
 * example is protocol-send.ts, which a test runs).
 */
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
import { checkSignatureHeaders, parseSigningSecrets, verifyWebhook } from '@outbox/protocol'

// One secret, or during a rotation each that may sign: 'whsec_new,whsec_old', as `outbox relay` reads it.
const keys = parseSigningSecrets((process.env.OUTBOX_SECRET ?? '').split(','))

const early = checkSignatureHeaders(req.headers) // before reading the body: a reason to refuse, or undefined
const check = verifyWebhook(keys, req.headers, rawBody) // { ok: true } or { ok: false, reason }
// #endregion signatures
console.log(body, early, check)
