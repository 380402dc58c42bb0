import type { Kysely } from 'kysely'
import type { FirstSequence, SequencePolicy } from './options.js'
import type { ConsumerDatabase } from './schema.js'
import { ensureCursor } from './sql/ensure-cursor.js'
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
 * `cursor` is the last applied sequence, 0 when nothing was applied yet. Under `'off'` everything applies.
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
 * Locks the aggregate's cursor for the rest of the transaction (creating it at 0 the first time) and returns
 * the last applied sequence. One round trip when the cursor exists, three the first time an aggregate is seen.
 */
export async function claimCursor(db: Kysely<ConsumerDatabase>, key: AggregateKey): Promise<number> {
  const existing = await lockCursor(db, key)
  if (existing !== undefined) return existing
  await ensureCursor(db, key)
  const created = await lockCursor(db, key)
  // Only possible if someone deletes cursors by hand; failing (→ 500, retried) beats applying without the lock.
  if (created === undefined) throw new Error('the consumer cursor row vanished while it was being created')
  return created
}
