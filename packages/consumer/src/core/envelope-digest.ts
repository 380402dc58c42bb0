import { createHash } from 'node:crypto'
import type { ReceivedEvent } from '@outbox/protocol'

/** JSON with every object's keys sorted, so a sender that reorders keys between retries keeps one digest. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  if (typeof value === 'object' && value !== null) {
    const keys = Object.keys(value).sort()
    const members = keys
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`)
    return `{${members.join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

/**
 * The digest recorded with an event id: sha256 (hex) over the event as the envelope reader produced it — its type,
 * aggregate, sequence and data — and never over the raw body, whose delivery-specific parts change between
 * retries of one event (the id's letter case on this project's relay, Stripe's `pending_webhooks`, timestamps in
 * signature headers). A duplicate whose digest differs from the recorded one is the same id with another payload:
 * a sender's bug or id reuse, reported rather than silently ignored.
 */
export function envelopeDigest(event: ReceivedEvent<unknown>): string {
  const covered = [event.type, event.aggregateType ?? null, event.aggregateId ?? null, event.sequence ?? null]
  return createHash('sha256')
    .update(`${canonical(covered)}\n${canonical(event.data)}`)
    .digest('hex')
}
