import { HEADERS, parseSigningSecrets } from '@outbox/protocol'
import type { WebhookHeaders } from '../core/headers.js'
import { standardWebhooksVerifier, type VerifyFailure, type WebhookVerifier } from '../core/verifier.js'
import { OutboxError } from '../errors.js'
import { checkTolerance } from './tolerance.js'

/** Options of {@link svixVerifier}. */
export interface SvixVerifierOptions {
  /** Accepted distance between the signed timestamp and this server's clock, either way. @defaultValue 300 */
  readonly toleranceSeconds?: number
}

/** Svix's own names for the three Standard Webhooks headers, by standard name. */
const SVIX_NAMES: Readonly<Record<string, string>> = Object.freeze({
  [HEADERS.webhookId]: 'svix-id',
  [HEADERS.webhookTimestamp]: 'svix-timestamp',
  [HEADERS.webhookSignature]: 'svix-signature',
})

/**
 * The request's headers as the Standard Webhooks verifier reads them: the `webhook-*` headers when the request has
 * `webhook-id`, otherwise Svix's `svix-*` headers under the standard names. One family or the other, never a mix,
 * so the id, timestamp and signature checked together are the ones the sender signed together.
 */
export function standardHeaderNames(headers: WebhookHeaders): WebhookHeaders {
  if (headers.get(HEADERS.webhookId) !== undefined || headers.get('svix-id') === undefined) return headers
  let record: Readonly<Record<string, string>> | undefined
  return {
    get: (name) => headers.get(SVIX_NAMES[name.toLowerCase()] ?? name),
    toRecord() {
      if (record === undefined) {
        const copy: Record<string, string> = { ...headers.toRecord() }
        for (const [standard, svix] of Object.entries(SVIX_NAMES)) {
          const value = headers.get(svix)
          if (value === undefined) delete copy[standard]
          else copy[standard] = value
        }
        record = Object.freeze(copy)
      }
      return record
    },
  }
}

/**
 * Svix (https://docs.svix.com/receiving/verifying-payloads/how-manual), and through it every sender whose
 * webhooks are "powered by Svix": Standard Webhooks signatures, sent under Svix's header names `svix-id`,
 * `svix-timestamp` and `svix-signature` — or under the standard `webhook-*` names, which white-labelled Svix
 * accounts use. It is {@link standardWebhooksVerifier} reading either family (one or the other, never a mix), so
 * every check is the same: before the body is read, the three headers must be there with a timestamp within
 * `toleranceSeconds` (401 and the connection closed, unread, otherwise); then the `v1,` signature over
 * `id.timestamp.body` must match under one of the secrets.
 *
 * Pair it with `standardWebhooksEnvelope`, which takes the event id from the same headers, under
 * `sequence: 'off'`. For a sender that uses the standard names only, `standardWebhooksVerifier` is enough.
 *
 * @param secret the endpoint's signing secret (`whsec_…`, from the sender's dashboard or the Svix app portal), or
 *   several while rolling it; one that is not `whsec_` + base64 of at least 24 bytes throws `OutboxError`
 *   `ERR_OUTBOX_INVALID_SECRET`.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, standardWebhooksEnvelope, svixVerifier } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const svix = createConsumer({
 *   db,
 *   verify: svixVerifier(process.env.SVIX_WEBHOOK_SECRET ?? ''),
 *   envelope: standardWebhooksEnvelope,
 *   source: 'svix',
 *   sequence: 'off',
 * })
 * ```
 */
export function svixVerifier(
  secret: string | readonly string[],
  options: SvixVerifierOptions = {},
): WebhookVerifier {
  let keys: ReturnType<typeof parseSigningSecrets>
  try {
    keys = parseSigningSecrets(secret)
  } catch (error) {
    const detail =
      (error as OutboxError).code === 'ERR_OUTBOX_INVALID_SECRET'
        ? (error as Error).message
        : 'the secret is not usable'
    throw new OutboxError('ERR_OUTBOX_INVALID_SECRET', `svixVerifier: ${detail}`, { cause: error })
  }
  const toleranceSeconds = checkTolerance(options?.toleranceSeconds, 'svixVerifier')
  const standard = standardWebhooksVerifier(keys, { toleranceSeconds })
  return Object.freeze({
    checkHeaders: (headers: WebhookHeaders, now: Date): VerifyFailure | undefined =>
      standard.checkHeaders?.(standardHeaderNames(headers), now),
    verify: (headers: WebhookHeaders, body: Uint8Array, now: Date) =>
      standard.verify(standardHeaderNames(headers), body, now),
  })
}
