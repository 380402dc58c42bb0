import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/** The aggregate key: always the pair, so `order:42` and `customer:42` never share a cursor. */
export interface AggregateKey {
  readonly aggregateType: string
  readonly aggregateId: string
}

/**
 * Locks the cursor row of an aggregate of the consumer's `source` until the transaction ends and returns its last
 * applied sequence, or `undefined` when the row does not exist.
 *
 * Called only after `recordEvent` left the cursor locked but unchanged (a stale event or a gap), to learn the
 * value it was judged against: this transaction already holds the row lock, so `FOR UPDATE` returns at once, and
 * the new statement's snapshot (READ COMMITTED) sees the version that was locked — nobody can have changed it
 * since. `FOR UPDATE` rather than a plain `SELECT` keeps that true even if a caller ever reaches it without the
 * lock: it would then wait its turn like any other event of the aggregate. The whole primary key
 * `(source, aggregate_type, aggregate_id)` is given: another source's cursor of the same aggregate key is never
 * read nor locked.
 */
export async function lockCursor(
  db: Kysely<ConsumerDatabase>,
  source: string,
  key: AggregateKey,
): Promise<number | undefined> {
  const row = await db
    .selectFrom('consumer_cursors')
    .select('last_sequence')
    .where('source', '=', source)
    .where('aggregate_type', '=', key.aggregateType)
    .where('aggregate_id', '=', key.aggregateId)
    .forUpdate()
    .executeTakeFirst()
  return row === undefined ? undefined : Number(row.last_sequence)
}
