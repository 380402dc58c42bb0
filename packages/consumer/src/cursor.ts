import type { Kysely } from 'kysely'
import type { FirstSequence, SequencePolicy } from './options.js'
import type { ConsumerDatabase } from './schema.js'
import { type AggregateKey, lockCursor } from './sql/lock-cursor.js'

/**
 * What the sequence policy says about one unseen event, given the aggregate's cursor.
 *
 * - `apply`: run the handler and advance the cursor.
 * - `stale`: record the id, skip the handler, answer `stale_ignored`.
 * - `gap`: record nothing, answer 409 — the relay waits for `expected` first.
 */
export type SequenceVerdict =
  | { readonly kind: 'apply' }
  | { readonly kind: 'stale'; readonly cursor: number }
  | { readonly kind: 'gap'; readonly expected: number }

/**
 * Applies a sequence policy (pure: no I/O, so every corner is testable).
 *
 * `cursor` is the last applied sequence, 0 when nothing was applied yet. Under `'off'` everything applies. The
 * "apply?" question is also asked inside PostgreSQL, by the `outbox_record_event` function (sql/record-event.ts,
 * migration 0003), where the cursor is locked; a property test proves the two agree, and {@link judgeHeldCursor}
 * refuses to go on if they ever do not.
 */
export function judgeSequence(
  policy: SequencePolicy,
  firstSequence: FirstSequence,
  cursor: number,
  sequence: number,
): SequenceVerdict {
  if (policy === 'off') return { kind: 'apply' }
  if (policy === 'monotonic') return sequence > cursor ? { kind: 'apply' } : { kind: 'stale', cursor }
  if (cursor === 0 && firstSequence === 'any') return { kind: 'apply' }
  if (sequence === cursor + 1) return { kind: 'apply' }
  if (sequence <= cursor) return { kind: 'stale', cursor }
  return { kind: 'gap', expected: cursor + 1 }
}

/**
 * The cursor a brand-new aggregate is created with by `recordEvent`: the event's sequence when its first event
 * applies, else 0 ("nothing applied yet" — only a strict gap, which the caller rolls back).
 */
export function initialCursor(
  policy: SequencePolicy,
  firstSequence: FirstSequence,
  sequence: number,
): number {
  return judgeSequence(policy, firstSequence, 0, sequence).kind === 'apply' ? sequence : 0
}

/**
 * Judges an event whose cursor `recordEvent` locked but did not advance: reads that cursor — the consumer
 * `source`'s, the one the function judged — (one round trip, only on this rare path) and returns the `stale` or
 * `gap` verdict with it.
 *
 * An `apply` verdict here would mean the SQL predicate and {@link judgeSequence} disagree; that throws (a 500 the
 * producer retries) rather than guessing, since either guess could apply an event out of order or drop one.
 */
export async function judgeHeldCursor(
  db: Kysely<ConsumerDatabase>,
  source: string,
  key: AggregateKey,
  policy: SequencePolicy,
  firstSequence: FirstSequence,
  sequence: number,
): Promise<Exclude<SequenceVerdict, { kind: 'apply' }>> {
  const cursor = await lockCursor(db, source, key)
  // Only possible if someone deletes cursors by hand; failing (→ 500, retried) beats judging without the lock.
  if (cursor === undefined) throw new Error('the consumer cursor row vanished while this transaction held it')
  const verdict = judgeSequence(policy, firstSequence, cursor, sequence)
  if (verdict.kind === 'apply') {
    throw new Error(
      `the consumer's SQL and JavaScript sequence policies disagree (cursor ${cursor}, sequence ${sequence})`,
    )
  }
  return verdict
}
