import { createHmac, createSecretKey, type KeyObject, timingSafeEqual } from 'node:crypto'
import { OutboxError } from './errors.js'
import { HEADERS } from './headers.js'
import {
  type IncomingHeaders,
  readSignatureHeaders,
  type SignatureFailure,
  type VerifyOptions,
} from './signature-headers.js'

/**
 * The fewest bytes a decoded signing secret may have: the Standard Webhooks minimum (its secrets are 24 to 64
 * random bytes). A shorter key makes the HMAC as weak as the key, whatever the digest.
 *
 * @example
 * ```ts
 * import { MIN_SIGNING_SECRET_BYTES } from '@outbox/protocol'
 * import { randomBytes } from 'node:crypto'
 * const secret = `whsec_${randomBytes(Math.max(32, MIN_SIGNING_SECRET_BYTES)).toString('base64')}`
 * ```
 */
export const MIN_SIGNING_SECRET_BYTES = 24

const SECRET_PREFIX = 'whsec_'
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/
/** Said by every "too short" refusal: the one command a reader needs. */
const HOW_TO_GENERATE = 'generate one with: echo "whsec_$(openssl rand -base64 32)"'

/** One signing secret, checked and ready: what {@link parseSigningSecrets} returns. */
export interface SigningKey {
  /** The secret as configured (`whsec_…`), kept for messages; never logged by this package. */
  readonly secret: string
  /** The decoded key, made once, for `node:crypto`'s HMAC. */
  readonly key: KeyObject
}

/**
 * Checks one secret or a rotation list (an array, or one string with the secrets separated by commas, as an
 * environment variable holds them) and prepares them for signing or verifying. The first one signs; any verifies.
 *
 * Secrets are `whsec_` followed by padded base64 of at least {@link MIN_SIGNING_SECRET_BYTES} bytes (the
 * Standard Webhooks format). Throws {@link OutboxError} `ERR_OUTBOX_INVALID_SECRET` with a message that says
 * what is wrong and what to do — never the secret itself.
 *
 * @example
 * ```ts
 * import { parseSigningSecrets } from '@outbox/protocol'
 * const keys = parseSigningSecrets([
 *   'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
 *   'whsec_c2Vjb25kLXNlY3JldC1vZi0yNC1ieXRlcw==',
 * ])
 * ```
 */
export function parseSigningSecrets(secrets: string | readonly string[]): readonly SigningKey[] {
  // A string may hold a rotation list, comma-separated, as `OUTBOX_SECRET` does for the relay: "whsec_" and base64
  // never contain a comma, so `secret: process.env.OUTBOX_SECRET` means the same to every package.
  const list =
    typeof secrets === 'string' && secrets.includes(',')
      ? secrets.split(',').map((secret) => secret.trim())
      : typeof secrets === 'string'
        ? [secrets]
        : secrets
  if (!Array.isArray(list) || list.length === 0) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_SECRET',
      'signing secret: give a "whsec_…" string or a non-empty array',
    )
  }
  return Object.freeze(
    list.map((secret, index): SigningKey => {
      const where = list.length > 1 ? `signing secret #${index + 1}` : 'signing secret'
      if (typeof secret !== 'string' || !secret.startsWith(SECRET_PREFIX)) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where} must start with "whsec_" followed by base64 (${HOW_TO_GENERATE})`,
        )
      }
      const encoded = secret.slice(SECRET_PREFIX.length)
      // Node's base64 decoder skips what it cannot read instead of failing: check the text first, so a typo is
      // an error here rather than a different key that no sender shares.
      if (!BASE64.test(encoded) || encoded.length % 4 !== 0) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where}: the part after "whsec_" is not valid base64 (padded with "=" to a multiple of 4 characters)`,
        )
      }
      const bytes = Buffer.from(encoded, 'base64')
      if (bytes.length < MIN_SIGNING_SECRET_BYTES) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where} is ${bytes.length} bytes long; Standard Webhooks secrets need at least ${MIN_SIGNING_SECRET_BYTES} random bytes: ${HOW_TO_GENERATE}`,
        )
      }
      return Object.freeze({ secret, key: createSecretKey(bytes) })
    }),
  )
}

/** What the signer needs: the id and body of one attempt and when it is made. */
export interface SignInput {
  readonly eventId: string
  /** The exact body sent: text is signed as its UTF-8 bytes, bytes as they are. */
  readonly body: string | Uint8Array
  /** The attempt's time; defaults to now. */
  readonly timestamp?: Date
}

/** The base64 HMAC-SHA256 of `id.timestamp.body`, over the body's exact bytes. */
function sign(key: KeyObject, id: string, timestamp: number, body: string | Uint8Array): string {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64')
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
  const seconds = Math.floor((input.timestamp ?? new Date()).getTime() / 1000)
  const signatures = keys.map((key) => `v1,${sign(key.key, input.eventId, seconds, input.body)}`)
  return {
    [HEADERS.webhookId]: input.eventId,
    [HEADERS.webhookTimestamp]: String(seconds),
    [HEADERS.webhookSignature]: signatures.join(' '),
  }
}

/** The outcome of {@link verifyWebhook}. */
export type VerifyResult = { readonly ok: true } | { readonly ok: false; readonly reason: SignatureFailure }

/**
 * Verifies Standard Webhooks headers over the exact body bytes, accepting a signature by ANY of the keys and in
 * ANY `v1,` entry — also when `webhook-signature` was sent several times (an array, or joined with `, `).
 *
 * The headers are checked first (see `checkSignatureHeaders`: the timestamp window both ways), so no HMAC is
 * computed for a request that cannot be authentic; each key's HMAC is computed once, by `node:crypto`, and
 * compared with every presented signature in constant time. Never throws for a bad request: the reason comes
 * back instead.
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
  headers: IncomingHeaders,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): VerifyResult {
  const read = readSignatureHeaders(headers, options)
  if (typeof read === 'string') return { ok: false, reason: read }
  const presented = read.signatures.map((signature) => Buffer.from(signature))
  for (const { key } of keys) {
    const expected = Buffer.from(sign(key, read.id, read.timestamp, body))
    for (const candidate of presented) {
      if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) return { ok: true }
    }
  }
  return { ok: false, reason: 'invalid_signature' }
}
