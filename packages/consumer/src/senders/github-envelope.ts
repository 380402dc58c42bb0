import type { ReceivedEvent } from '@outbox/protocol'
import type { EnvelopeResult } from '../core/envelope-reader.js'
import type { WebhookHeaders } from '../core/headers.js'
import { isJsonObject } from './body-fields.js'

/**
 * Reads a GitHub webhook delivery (https://docs.github.com/en/webhooks/webhook-events-and-payloads) as the event
 * the consumer records — the `envelope` option for GitHub, after {@link githubVerifier}:
 *
 * | event field | from                                                                                          |
 * | ----------- | --------------------------------------------------------------------------------------------- |
 * | `eventId`   | the `X-GitHub-Delivery` header: a GUID per event, kept when a delivery is redelivered          |
 * | `type`      | the `X-GitHub-Event` header, plus `.` and the body's `action` when it has one: `issues.opened`, |
 * |             | `pull_request.closed`, `push` (no action), `ping`                                              |
 * | `data`      | the whole body                                                                                |
 *
 * No time (GitHub bodies have no common one), no aggregate and no sequence: run it under `sequence: 'off'` (the
 * default when `envelope` is given). A request without both headers, or whose body is not a JSON object, is
 * answered 400 `invalid_envelope`, nothing recorded. GitHub's first delivery to a new webhook is a `ping`: let
 * the handler return without doing anything for types it does not handle, so they are recorded and answered 200.
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
 * })
 * const onGitHub = github.node<{ issue?: { number: number } }>(async (event) => {
 *   if (event.type === 'issues.opened') console.log('opened', event.data.issue?.number)
 * })
 * ```
 */
export function githubEnvelope(body: unknown, headers: WebhookHeaders): EnvelopeResult {
  const delivery = headers.get('x-github-delivery')?.trim()
  const name = headers.get('x-github-event')?.trim()
  const errors: string[] = []
  if (!delivery) errors.push('the X-GitHub-Delivery header is required')
  if (!name) errors.push('the X-GitHub-Event header is required')
  if (!isJsonObject(body)) errors.push('a GitHub webhook body is a JSON object')
  if (errors.length > 0 || !isJsonObject(body)) return { errors }
  const action = typeof body.action === 'string' && body.action !== '' ? `.${body.action}` : ''
  const event: ReceivedEvent<unknown> = {
    eventId: delivery as string,
    type: `${name}${action}`,
    data: body,
  }
  return event
}
