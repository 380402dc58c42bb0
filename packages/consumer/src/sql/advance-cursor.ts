import type { Kysely } from 'kysely'
import { sql } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'
import type { AggregateKey } from './lock-cursor.js'

/**
 * Moves an aggregate's cursor to `sequence` after its handler ran, never backwards.
 *
 * The row is already locked by {@link lockCursor} in this transaction, so `GREATEST` is a second guard rather than
 * the only one: whatever path led here, a cursor can only grow. It runs AFTER the handler so the cursor moves only
 * with an effect that is about to commit; if the handler swallowed a database error, this fails with 25P02 (the
 * transaction is aborted) and the delivery is answered 500 and retried.
 */
export async function advanceCursor(
  db: Kysely<ConsumerDatabase>,
  key: AggregateKey,
  sequence: number,
): Promise<void> {
  await db
    .updateTable('consumer_cursors')
    .set({ last_sequence: sql<string>`greatest(last_sequence, ${sequence}::bigint)`, updated_at: sql`now()` })
    .where('aggregate_type', '=', key.aggregateType)
    .where('aggregate_id', '=', key.aggregateId)
    .execute()
}
