import type { Kysely } from 'kysely'
import { sql } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'
import type { AggregateKey } from './lock-cursor.js'

/**
 * Moves an aggregate's cursor to `sequence` after its handler ran, never backwards.
 *
 * The row is already locked by {@link lockCursor} in this transaction, so `GREATEST` is a second guard rather than
 * the only one: whatever path led here, a cursor can only grow. This statement also runs AFTER the handler on
 * purpose — if the handler swallowed a database error, the transaction is aborted and this fails with 25P02,
 * turning what would have been a silent `COMMIT`-that-rolls-back into a 500 the producer retries.
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
