import type { WebhookHeaders } from '../core/headers.js'
import type { VerifyFailure, WebhookVerifier } from '../core/verifier.js'
import { hmacKeys, hmacMatches } from './hmac-keys.js'

const GITHUB_SIGNATURE = 'x-hub-signature-256'
const SIGNATURE_FORMAT = /^sha256=([0-9a-fA-F]{64})$/

/** The signature bytes of a well-formed `X-Hub-Signature-256`, or undefined. */
function presentedSignature(headers: WebhookHeaders): Buffer | undefined {
  const match = SIGNATURE_FORMAT.exec(headers.get(GITHUB_SIGNATURE)?.trim() ?? '')
  return match?.[1] === undefined ? undefined : Buffer.from(match[1], 'hex')
}

/**
 * GitHub's webhook signature
 * (https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries): the `X-Hub-Signature-256`
 * header `sha256=<hex>`, an HMAC-SHA256 of the exact body keyed with the webhook's secret. Computed with
 * `node:crypto`, compared in constant time; any of several secrets may match, so the webhook's secret can be
 * changed on GitHub while both are accepted here.
 *
 * Before the body is read, the header must be there and be `sha256=` with 64 hex digits; otherwise the request is
 * answered 401 and its connection closed, unread. The legacy SHA-1 `X-Hub-Signature` alone is refused: GitHub
 * sends the SHA-256 header whenever the webhook has a secret, and a webhook without a secret cannot be verified.
 *
 * GitHub signs no timestamp, so a captured delivery can be sent again at any time: it is answered
 * `duplicate_ignored` for as long as its `X-GitHub-Delivery` id is kept in `processed_events` — give this
 * consumer's source a long retention (`pruneProcessed(db, { source: 'github', retention })`). Pair it with
 * {@link githubEnvelope}, under `sequence: 'off'`; set the webhook's content type to `application/json` (the
 * form-encoded one is answered 415).
 *
 * @param secret the webhook's secret, or several while changing it.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, githubEnvelope, githubVerifier } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const github = createConsumer({
 *   db,
 *   verify: githubVerifier(process.env.GITHUB_WEBHOOK_SECRET ?? ''),
 *   envelope: githubEnvelope,
 *   source: 'github',
 *   sequence: 'off',
 * })
 * ```
 */
export function githubVerifier(secret: string | readonly string[]): WebhookVerifier {
  const keys = hmacKeys(secret, 'githubVerifier')
  return Object.freeze({
    checkHeaders(headers: WebhookHeaders): VerifyFailure | undefined {
      return presentedSignature(headers) === undefined ? 'missing_signature' : undefined
    },
    verify(headers: WebhookHeaders, body: Uint8Array): VerifyFailure | undefined {
      const presented = presentedSignature(headers)
      if (presented === undefined) return 'missing_signature'
      return hmacMatches(keys, [body], [presented]) ? undefined : 'invalid_signature'
    },
  })
}
