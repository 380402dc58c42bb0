import type { ReceivedEvent } from '@outbox/protocol'
import type { EnvelopeResult } from '../core/envelope-reader.js'
import { dataOf, isJsonObject, isoTime } from './body-fields.js'

/**
 * Reads a Stripe event (https://docs.stripe.com/api/events/object) as the event the consumer records — the
 * `envelope` option for Stripe, after {@link stripeVerifier}:
 *
 * | event field  | from the body                                                                        |
 * | ------------ | ------------------------------------------------------------------------------------ |
 * | `eventId`    | `id` (`evt_…`): the same on every retry of the event, so retries are duplicates      |
 * | `type`       | `type` (`invoice.paid`, `customer.subscription.updated`, …)                          |
 * | `data`       | `data` (`{ object, previous_attributes? }`); a thin event without `data`: the body   |
 * | `occurredAt` | `created` (unix seconds; an ISO string for thin events), as ISO-8601                 |
 *
 * No aggregate and no sequence: run it under `sequence: 'off'` (the default when `envelope` is given). Stripe
 * does not deliver events in order, so a handler that cares compares `data.object`'s state or re-fetches it. A
 * body without a string `id` and `type` is answered 400 `invalid_envelope`, nothing recorded.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, stripeEnvelope, stripeVerifier } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const stripe = createConsumer({
 *   db,
 *   verify: stripeVerifier(process.env.STRIPE_WEBHOOK_SECRET ?? ''),
 *   envelope: stripeEnvelope,
 *   source: 'stripe',
 * })
 * const onStripe = stripe.node<{ object: { id: string } }>(async (event) => {
 *   if (event.type === 'invoice.paid') console.log('paid', event.data.object.id)
 * })
 * ```
 */
export function stripeEnvelope(body: unknown): EnvelopeResult {
  if (!isJsonObject(body)) return { errors: ['a Stripe event is a JSON object'] }
  const errors: string[] = []
  if (typeof body.id !== 'string' || body.id === '') errors.push('the event has no "id" (evt_…)')
  if (typeof body.type !== 'string' || body.type === '') errors.push('the event has no "type"')
  if (errors.length > 0) return { errors }
  const event: ReceivedEvent<unknown> = {
    eventId: body.id as string,
    type: body.type as string,
    data: dataOf(body),
    occurredAt: isoTime(body.created),
  }
  return event
}
