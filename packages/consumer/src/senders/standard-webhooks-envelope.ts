import { HEADERS, type ReceivedEvent } from '@outbox/protocol'
import type { EnvelopeResult } from '../core/envelope-reader.js'
import type { WebhookHeaders } from '../core/headers.js'
import { dataOf, isJsonObject, isoTime } from './body-fields.js'
import { standardHeaderNames } from './svix-verifier.js'

/**
 * Reads a webhook of any Standard Webhooks sender (https://www.standardwebhooks.com) — Svix and the services it
 * sends for, or anyone following the standard — as the event the consumer records: the `envelope` option, after
 * `svixVerifier` or `standardWebhooksVerifier`. The standard fixes the headers; the body is the sender's own JSON,
 * read here in the shape the standard recommends, `{ type, timestamp, data }`:
 *
 * | event field  | from                                                                                       |
 * | ------------ | ------------------------------------------------------------------------------------------ |
 * | `eventId`    | the `webhook-id` header (`svix-id` under Svix's names): the same on every retry             |
 * | `type`       | the body's `type` (a non-empty string; required)                                           |
 * | `data`       | the body's `data` when it has one, otherwise the whole body                                |
 * | `occurredAt` | the body's `timestamp` (an ISO-8601 string, or unix seconds) when it has a usable one       |
 *
 * No aggregate and no sequence: run it under `sequence: 'off'` (the default when `envelope` is given). A request
 * without the id header, or whose body is not an object with a `type`, is answered 400 `invalid_envelope`, nothing
 * recorded.
 *
 * A sender whose body names its fields otherwise: wrap it and hand it the standard shape — the id still comes from
 * the signed header:
 *
 * ```ts
 * import { type EnvelopeReader, standardWebhooksEnvelope } from '@outbox/consumer'
 *
 * // A sender whose bodies are { event: 'user.created', payload: { … } }:
 * const envelope: EnvelopeReader = (body, headers) => {
 *   const { event, payload } = body as { event?: unknown; payload?: unknown }
 *   return standardWebhooksEnvelope({ type: event, data: payload }, headers)
 * }
 * ```
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
export function standardWebhooksEnvelope(body: unknown, headers: WebhookHeaders): EnvelopeResult {
  const id = standardHeaderNames(headers).get(HEADERS.webhookId)?.trim()
  const errors: string[] = []
  if (!id) errors.push('the webhook-id header (svix-id under Svix’s names) is required')
  if (!isJsonObject(body)) {
    errors.push('the body must be a JSON object with a "type", as { type, timestamp, data }')
  } else if (typeof body.type !== 'string' || body.type === '') {
    errors.push('the body has no "type" string (Standard Webhooks bodies are { type, timestamp, data })')
  }
  if (errors.length > 0 || !isJsonObject(body)) return { errors }
  const event: ReceivedEvent<unknown> = {
    eventId: id as string,
    type: body.type as string,
    data: dataOf(body),
    occurredAt: isoTime(body.timestamp),
  }
  return event
}
