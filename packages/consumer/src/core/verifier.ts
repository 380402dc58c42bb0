import {
  checkSignatureHeaders,
  DEFAULT_SIGNATURE_TOLERANCE_SECONDS,
  type SignatureFailure,
  type SigningKey,
  verifyWebhook,
} from '@outbox/protocol'
import type { WebhookHeaders } from './headers.js'

/**
 * Why a verifier refused a request; each is answered 401 with that problem code.
 *
 * @example
 * ```ts
 * import type { VerifyFailure } from '@outbox/consumer'
 * const failure: VerifyFailure = 'invalid_signature'
 * ```
 */
export type VerifyFailure = SignatureFailure

/**
 * Authenticates requests of one sender: the `verify` option of `createConsumer`. `checkHeaders` runs before the
 * body is read — a request without well-formed signature headers is refused, and its connection closed, without
 * reading a byte of its body — and `verify` then checks the signature over the exact body bytes.
 *
 * Shipped: {@link standardWebhooksVerifier} (this project's relay and any Standard Webhooks sender, the default
 * when `secret` is given), `svixVerifier`, `stripeVerifier` and `githubVerifier`. A plain function `(headers, body) => boolean`
 * is accepted too, for anything else.
 *
 * @example
 * ```ts
 * import type { WebhookVerifier } from '@outbox/consumer'
 * import { createHmac, timingSafeEqual } from 'node:crypto'
 *
 * const sharedSecret: WebhookVerifier = {
 *   checkHeaders: (headers) => (headers.get('x-signature') ? undefined : 'missing_signature'),
 *   verify: (headers, body) => {
 *     const expected = createHmac('sha256', process.env.ACME_WEBHOOK_SECRET ?? '').update(body).digest()
 *     const given = Buffer.from(headers.get('x-signature') ?? '', 'hex')
 *     return given.length === expected.length && timingSafeEqual(given, expected) ? undefined : 'invalid_signature'
 *   },
 * }
 * ```
 */
export interface WebhookVerifier {
  /** Checks the headers alone, before the body is read; a failure is answered at once. */
  checkHeaders?(headers: WebhookHeaders, now: Date): VerifyFailure | undefined
  /** Checks the signature over the body's exact bytes; undefined means authentic. */
  verify(
    headers: WebhookHeaders,
    body: Uint8Array,
    now: Date,
  ): VerifyFailure | undefined | Promise<VerifyFailure | undefined>
}

/**
 * A verifier as a plain function: true means authentic. Anything it throws is a 500 (a bug, not a forgery).
 *
 * @example
 * ```ts
 * import type { VerifyFunction } from '@outbox/consumer'
 * const verify: VerifyFunction = (headers) => headers.get('x-api-key') === process.env.API_KEY
 * ```
 */
export type VerifyFunction = (headers: WebhookHeaders, body: Uint8Array) => boolean | Promise<boolean>

/** Options of {@link standardWebhooksVerifier}. */
export interface StandardWebhooksVerifierOptions {
  /** Accepted distance between `webhook-timestamp` and this server's clock, either way. @defaultValue 300 */
  readonly toleranceSeconds?: number
}

/**
 * The Standard Webhooks verifier (https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp` and
 * `webhook-signature` (`v1,<base64 HMAC-SHA256>`), any of several keys during a rotation. This project's relay
 * signs this way, and so do Svix and every sender that follows the standard; `createConsumer({ secret })` uses it.
 *
 * @param keys the secrets, parsed by `parseSigningSecrets` from `@outbox/protocol`.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, standardWebhooksVerifier } from '@outbox/consumer'
 * import { parseSigningSecrets } from '@outbox/protocol'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const verify = standardWebhooksVerifier(parseSigningSecrets(process.env.SVIX_WEBHOOK_SECRET ?? ''))
 * const consumer = createConsumer({ db, verify, source: 'svix', sequence: 'off' })
 * ```
 */
export function standardWebhooksVerifier(
  keys: readonly SigningKey[],
  options: StandardWebhooksVerifierOptions = {},
): WebhookVerifier {
  const toleranceSeconds = options.toleranceSeconds ?? DEFAULT_SIGNATURE_TOLERANCE_SECONDS
  return Object.freeze({
    // The protocol's own pre-check: exactly what verifyWebhook checks first, so refusing early changes no answer.
    checkHeaders: (headers: WebhookHeaders, now: Date) =>
      checkSignatureHeaders(headers, { toleranceSeconds, now }),
    verify(headers: WebhookHeaders, body: Uint8Array, now: Date): VerifyFailure | undefined {
      const verified = verifyWebhook(keys, headers, body, { toleranceSeconds, now })
      return verified.ok ? undefined : verified.reason
    },
  })
}

/** The detail sentence of each verifier refusal (the same for every sender: it must not help a forger). */
export const SIGNATURE_DETAILS: Readonly<Record<VerifyFailure, string>> = Object.freeze({
  missing_signature: 'the signature headers are missing or malformed',
  invalid_signature: 'no signature matches the body with any configured secret',
  timestamp_out_of_window:
    'the signed timestamp is too far from this server’s clock (expired or in the future)',
})

/** Turns the `verify` option (a verifier or a function) into a verifier. */
export function toVerifier(verify: WebhookVerifier | VerifyFunction): WebhookVerifier {
  if (typeof verify === 'function') {
    return {
      verify: async (headers, body) => ((await verify(headers, body)) ? undefined : 'invalid_signature'),
    }
  }
  return verify
}
