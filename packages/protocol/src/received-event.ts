import type { JsonValue } from './envelope.js'

/**
 * An event as a consumer receives it from ANY sender: this project's relay fills every field (it is an
 * {@link OutboxEvent}), while another sender's envelope — Stripe, GitHub, a Standard Webhooks sender — may carry
 * no aggregate, no sequence or no time. The consumer records such an event under `sequence: 'off'`, where only
 * `eventId` (unique per consumer source) matters.
 *
 * @example
 * ```ts
 * import type { ReceivedEvent } from '@outbox/protocol'
 * const lane = (event: ReceivedEvent) => (event.aggregateId === undefined ? 'none' : `${event.aggregateType}:${event.aggregateId}`)
 * ```
 */
export interface ReceivedEvent<TData = JsonValue> {
  /** Unique per sender (and consumer `source`): a UUID from this project's relay, `evt_…` from Stripe, … */
  readonly eventId: string
  readonly type: string
  readonly data: TData
  /** ISO-8601 time the sender gives for the event, when it gives one. */
  readonly occurredAt?: string | undefined
  readonly aggregateType?: string | undefined
  readonly aggregateId?: string | undefined
  /** The event's position in its aggregate (1, 2, …), when the sender numbers them. */
  readonly sequence?: number | undefined
}
