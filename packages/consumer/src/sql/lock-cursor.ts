import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/** The aggregate key: always the pair, so `order:42` and `customer:42` never share a cursor. */
export interface AggregateKey {
  readonly aggregateType: string
  readonly aggregateId: string
}

/**
 * Locks an aggregate's cursor row until the transaction ends and returns its last applied sequence, or
 * `undefined` when the row does not exist yet.
 *
 * `FOR UPDATE` is what serializes two different events of one aggregate: the second waits here (after recording
 * its id, before its handler) until the first commits, then — at READ COMMITTED — re-reads the committed row, so
 * it judges its sequence against the cursor the first one left. `SKIP LOCKED`/`NOWAIT` were rejected: the
 * second event must wait its turn, not be skipped or fail. Plain `FOR UPDATE` (not `FOR NO KEY UPDATE`) is
 * enough: nothing references this table.
 */
export async function lockCursor(
  db: Kysely<ConsumerDatabase>,
  key: AggregateKey,
): Promise<number | undefined> {
  const row = await db
    .selectFrom('consumer_cursors')
    .select('last_sequence')
    .where('aggregate_type', '=', key.aggregateType)
    .where('aggregate_id', '=', key.aggregateId)
    .forUpdate()
    .executeTakeFirst()
  return row === undefined ? undefined : Number(row.last_sequence)
}
