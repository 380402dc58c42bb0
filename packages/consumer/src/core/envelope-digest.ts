import { hash } from 'node:crypto'
import type { ReceivedEvent } from '@outbox/protocol'

/**
 * Appends `value` as JSON with every object's keys sorted, so a sender that reorders keys between retries keeps one
 * digest. Members whose value is undefined are left out, and anything JSON has no text for (undefined, a function)
 * is `null`, as in an array.
 *
 * The text is what every recorded digest was computed over: it must never change, or a retry across an upgrade
 * would read as another payload (`envelope-digest.test.ts` pins it). Built in one string, not with
 * `map`/`filter`/`join`, because this runs once per delivery and those arrays cost more than the hash.
 */
function canonical(value: unknown, out: string): string {
  if (typeof value !== 'object' || value === null) return out + (JSON.stringify(value) ?? 'null')
  if (Array.isArray(value)) {
    out += '['
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ','
      // A hole in a sparse array (only a custom envelope reader could make one) has always been left empty.
      if (value[i] !== undefined || i in value) out = canonical(value[i], out)
    }
    return `${out}]`
  }
  const record = value as Record<string, unknown>
  const keys = Object.keys(record).sort()
  out += '{'
  let first = true
  for (const key of keys) {
    const member = record[key]
    if (member === undefined) continue
    if (!first) out += ','
    out = canonical(member, `${out}${JSON.stringify(key)}:`)
    first = false
  }
  return `${out}}`
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
  // crypto.hash: one call, without the Hash object createHash builds (a third of the digest's cost).
  return hash('sha256', canonical(event.data, `${canonical(covered, '')}\n`), 'hex')
}
