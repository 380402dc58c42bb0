import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'
import type { AggregateKey } from './lock-cursor.js'

/**
 * Creates an aggregate's cursor row at 0 ("nothing applied yet") if it does not exist.
 *
 * Called only when {@link lockCursor} found no row, so the common case costs one statement. `ON CONFLICT DO
 * NOTHING` closes the race of two first events of a new aggregate: the second blocks on the primary key until
 * the first commits, then does nothing, and the `FOR UPDATE` that follows sees the committed row. Rejected: an
 * upsert `DO UPDATE … RETURNING` that would lock and read in one statement — it writes a new row version on every
 * delivery, where `SELECT … FOR UPDATE` only marks the row.
 */
export async function ensureCursor(db: Kysely<ConsumerDatabase>, key: AggregateKey): Promise<void> {
  await db
    .insertInto('consumer_cursors')
    .values({ aggregate_type: key.aggregateType, aggregate_id: key.aggregateId, last_sequence: 0 })
    .onConflict((conflict) => conflict.columns(['aggregate_type', 'aggregate_id']).doNothing())
    .execute()
}
