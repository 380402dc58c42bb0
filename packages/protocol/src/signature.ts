import { timingSafeEqual } from 'node:crypto'
import { Webhook } from 'standardwebhooks'
import { OutboxError } from './errors.js'
import { HEADERS } from './headers.js'

/** How far a `webhook-timestamp` may be from the receiver's clock, either way, by default (Standard Webhooks). */
export const DEFAULT_SIGNATURE_TOLERANCE_SECONDS = 300

const SECRET_PREFIX = 'whsec_'
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

/** One signing secret, checked and ready: what {@link parseSigningSecrets} returns. */
export interface SigningKey {
  /** The secret as configured (`whsec_…`), kept for messages; never logged by this package. */
  readonly secret: string
  readonly webhook: Webhook
}

/**
 * Checks one secret or a rotation list and prepares them for signing or verifying.
 *
 * Secrets are `whsec_` followed by base64 (the Standard Webhooks format). Throws {@link OutboxError}
 * `ERR_OUTBOX_INVALID_SECRET` with a message that says what is wrong — never the secret itself.
 *
 * @example
 * ```ts
 * import { parseSigningSecrets } from '@outbox/protocol'
 * const keys = parseSigningSecrets(['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'whsec_dGVzdC1zZWNyZXQtMg=='])
 * ```
 */
export function parseSigningSecrets(secrets: string | readonly string[]): readonly SigningKey[] {
  const list = typeof secrets === 'string' ? [secrets] : secrets
  if (!Array.isArray(list) || list.length === 0) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_SECRET',
      'signing secret: give a "whsec_…" string or a non-empty array',
    )
  }
  return Object.freeze(
    list.map((secret, index) => {
      const where = list.length > 1 ? `signing secret #${index + 1}` : 'signing secret'
      if (typeof secret !== 'string' || !secret.startsWith(SECRET_PREFIX)) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where} must start with "whsec_" followed by base64`,
        )
      }
      const encoded = secret.slice(SECRET_PREFIX.length)
      // standardwebhooks decodes strict, padded base64 and throws a bare Error otherwise: check it here so the
      // caller gets an OutboxError that says what to fix.
      if (!BASE64.test(encoded) || encoded.length % 4 !== 0) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where}: the part after "whsec_" is not valid base64 (padded with "=" to a multiple of 4 characters)`,
        )
      }
      try {
        return { secret, webhook: new Webhook(secret) }
      } catch (error) {
        throw new OutboxError('ERR_OUTBOX_INVALID_SECRET', `${where}: the key is not usable`, {
          cause: error,
        })
      }
    }),
  )
}

/** What the signer needs: the id and body of one attempt and when it is made. */
export interface SignInput {
  readonly eventId: string
  readonly body: string
  /** The attempt's time; defaults to now. */
  readonly timestamp?: Date
}

/**
 * Builds the three Standard Webhooks headers for one attempt, with one `v1,…` signature per key (rotation).
 *
 * @example
 * ```ts
 * import { parseSigningSecrets, signWebhook } from '@outbox/protocol'
 * const keys = parseSigningSecrets('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')
 * const headers = signWebhook(keys, { eventId: 'e1', body: '{}' })
 * ```
 */
export function signWebhook(keys: readonly SigningKey[], input: SignInput): Record<string, string> {
  const timestamp = input.timestamp ?? new Date()
  const signatures = keys.map((key) => key.webhook.sign(input.eventId, timestamp, input.body))
  return {
    [HEADERS.webhookId]: input.eventId,
    [HEADERS.webhookTimestamp]: String(Math.floor(timestamp.getTime() / 1000)),
    [HEADERS.webhookSignature]: signatures.join(' '),
  }
}

/** Why {@link verifyWebhook} refused a request. */
export type SignatureFailure = 'missing_signature' | 'timestamp_out_of_window' | 'invalid_signature'

/** The outcome of {@link verifyWebhook}. */
export type VerifyResult = { readonly ok: true } | { readonly ok: false; readonly reason: SignatureFailure }

/** Options of {@link verifyWebhook}. */
export interface VerifyOptions {
  /** Accepted clock distance either way. @defaultValue 300 */
  readonly toleranceSeconds?: number
  /** The receiver's clock, for tests. @defaultValue `new Date()` */
  readonly now?: Date
}

type HeaderBag = Readonly<Record<string, string | readonly string[] | undefined>>

function single(headers: HeaderBag, name: string): string | undefined {
  const value = headers[name]
  return typeof value === 'string' ? value : undefined
}

/**
 * Verifies Standard Webhooks headers over the exact body bytes, accepting a signature by ANY of the keys.
 *
 * The timestamp window is checked both ways (expired and from the future) before any HMAC is computed, and
 * signatures are compared in constant time. Never throws for a bad request: the reason comes back instead.
 *
 * @example
 * ```ts
 * import { parseSigningSecrets, signWebhook, verifyWebhook } from '@outbox/protocol'
 * const keys = parseSigningSecrets('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')
 * const headers = signWebhook(keys, { eventId: 'e1', body: '{}' })
 * verifyWebhook(keys, headers, '{}') // → { ok: true }
 * ```
 */
export function verifyWebhook(
  keys: readonly SigningKey[],
  headers: HeaderBag,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): VerifyResult {
  const id = single(headers, HEADERS.webhookId)
  const timestampText = single(headers, HEADERS.webhookTimestamp)
  const signatureText = single(headers, HEADERS.webhookSignature)
  if (!id || !timestampText || !signatureText) return { ok: false, reason: 'missing_signature' }
  if (!/^\d{1,12}$/.test(timestampText)) return { ok: false, reason: 'timestamp_out_of_window' }
  const timestamp = Number(timestampText)
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000)
  const tolerance = options.toleranceSeconds ?? DEFAULT_SIGNATURE_TOLERANCE_SECONDS
  if (Math.abs(now - timestamp) > tolerance) return { ok: false, reason: 'timestamp_out_of_window' }

  const payload = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength)
  const presented = signatureText
    .split(' ')
    .filter((part) => part.startsWith('v1,'))
    .map((part) => Buffer.from(part.slice(3)))
  for (const key of keys) {
    const expected = Buffer.from(key.webhook.sign(id, new Date(timestamp * 1000), payload).slice(3))
    for (const candidate of presented) {
      if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) return { ok: true }
    }
  }
  return { ok: false, reason: 'invalid_signature' }
}
