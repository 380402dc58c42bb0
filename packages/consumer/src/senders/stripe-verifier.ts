import type { WebhookHeaders } from '../core/headers.js'
import type { VerifyFailure, WebhookVerifier } from '../core/verifier.js'
import { hmacKeys, hmacMatches } from './hmac-keys.js'
import { checkTolerance, withinTolerance } from './tolerance.js'

/** Options of {@link stripeVerifier}. */
export interface StripeVerifierOptions {
  /**
   * Accepted distance between the signed timestamp (`t=`) and this server's clock, either way. (Stripe's own
   * library refuses only old timestamps; one from the future is refused here too, as for Standard Webhooks.)
   * @defaultValue 300
   */
  readonly toleranceSeconds?: number
}

/** The `Stripe-Signature` header, parsed. */
interface StripeSignature {
  readonly timestamp: string
  readonly signatures: readonly Buffer[]
}

const STRIPE_SIGNATURE = 'stripe-signature'
const HEX_SHA256 = /^[0-9a-fA-F]{64}$/

/**
 * Parses `t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`. Only `v1` entries count (Stripe's current scheme; `v0`
 * is test-mode legacy and never sent to live endpoints); an entry that is not 64 hex digits is ignored. Undefined
 * when there is no single numeric `t` or no well-formed `v1`.
 */
function parseStripeSignature(header: string | undefined): StripeSignature | undefined {
  if (header === undefined) return undefined
  let timestamp: string | undefined
  const signatures: Buffer[] = []
  for (const item of header.split(',')) {
    const at = item.indexOf('=')
    if (at < 0) continue
    const key = item.slice(0, at).trim()
    const value = item.slice(at + 1).trim()
    if (key === 't') {
      // Two timestamps would leave it to chance which one was signed.
      if (timestamp !== undefined || !/^\d{1,12}$/.test(value)) return undefined
      timestamp = value
    } else if (key === 'v1' && HEX_SHA256.test(value)) {
      signatures.push(Buffer.from(value, 'hex'))
    }
  }
  if (timestamp === undefined || signatures.length === 0) return undefined
  return { timestamp, signatures }
}

function checkStripeHeaders(
  headers: WebhookHeaders,
  now: Date,
  toleranceSeconds: number,
): StripeSignature | VerifyFailure {
  const parsed = parseStripeSignature(headers.get(STRIPE_SIGNATURE))
  if (parsed === undefined) return 'missing_signature'
  if (!withinTolerance(Number(parsed.timestamp), now, toleranceSeconds)) return 'timestamp_out_of_window'
  return parsed
}

/**
 * Stripe's webhook signature (https://docs.stripe.com/webhooks#verify-events): the `Stripe-Signature` header
 * `t=<unix seconds>,v1=<hex>`, an HMAC-SHA256 of `` `${t}.${body}` `` keyed with the endpoint's signing secret
 * (`whsec_…`, used as it is). Any `v1` entry may match — Stripe sends one per active secret while a secret is
 * rolled — and so may any of the secrets given here. Computed with `node:crypto`, compared in constant time.
 *
 * Before the body is read, the header must be there with a numeric `t` within `toleranceSeconds` of this server's
 * clock and at least one 64-hex-digit `v1`; otherwise the request is answered 401 and its connection closed,
 * unread. Pair it with {@link stripeEnvelope}, under `sequence: 'off'` (Stripe events have no aggregate or
 * sequence, and Stripe does not deliver them in order).
 *
 * @param secret the endpoint's signing secret (Dashboard → Webhooks → the endpoint → Signing secret, or what
 *   `stripe listen` prints), or several while rolling it. A Stripe API key (`sk_…`, `rk_…`, `pk_…`) or anything
 *   else not starting with `whsec_` throws `OutboxError` `ERR_OUTBOX_INVALID_SECRET`.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, stripeEnvelope, stripeVerifier } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const stripe = createConsumer({
 *   db,
 *   verify: stripeVerifier(process.env.STRIPE_WEBHOOK_SECRET ?? '', { toleranceSeconds: 300 }),
 *   envelope: stripeEnvelope,
 *   source: 'stripe',
 *   sequence: 'off',
 * })
 * ```
 */
export function stripeVerifier(
  secret: string | readonly string[],
  options: StripeVerifierOptions = {},
): WebhookVerifier {
  const keys = hmacKeys(secret, 'stripeVerifier', (one) => {
    if (/^(sk|rk|pk)_/.test(one)) {
      return "is a Stripe API key; pass the endpoint's webhook signing secret (whsec_…) instead"
    }
    return one.startsWith('whsec_')
      ? undefined
      : 'must be the endpoint’s webhook signing secret, which starts with whsec_'
  })
  const toleranceSeconds = checkTolerance(options?.toleranceSeconds, 'stripeVerifier')
  return Object.freeze({
    checkHeaders(headers: WebhookHeaders, now: Date): VerifyFailure | undefined {
      const checked = checkStripeHeaders(headers, now, toleranceSeconds)
      return typeof checked === 'string' ? checked : undefined
    },
    verify(headers: WebhookHeaders, body: Uint8Array, now: Date): VerifyFailure | undefined {
      // Checked again: `verify` must stand alone for code that calls it without `checkHeaders`.
      const checked = checkStripeHeaders(headers, now, toleranceSeconds)
      if (typeof checked === 'string') return checked
      return hmacMatches(keys, [`${checked.timestamp}.`, body], checked.signatures)
        ? undefined
        : 'invalid_signature'
    },
  })
}
