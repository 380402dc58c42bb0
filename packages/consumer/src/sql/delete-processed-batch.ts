import type { Kysely } from 'kysely'
import { sql } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/**
 * The cut-off of a retention, from the database clock (`now()`, the clock that wrote `received_at`), never the
 * application's: rows received before it are past retention.
 */
export function receivedBefore(retentionMs: number) {
  return sql<Date>`now() - make_interval(secs => ${retentionMs / 1000}::double precision)`
}

/**
 * Deletes up to `batchSize` of the oldest `processed_events` rows received more than `retentionMs` ago; returns
 * how many it deleted.
 *
 * Shaped for a live table: the subquery walks `processed_events_received_at_idx` oldest first and stops at
 * `LIMIT`, so each batch is a short transaction that holds few locks, instead of one `DELETE … WHERE received_at <
 * …` that could lock millions of rows and bloat WAL in one go. `SKIP LOCKED` lets two pruners run side by side
 * without waiting on each other. The cut-off is computed from the database clock (`now()`, the same clock that
 * wrote `received_at`), never the application's. Cursors are a different table and are never touched.
 */
export async function deleteProcessedBatch(
  db: Kysely<ConsumerDatabase>,
  request: { readonly retentionMs: number; readonly batchSize: number },
): Promise<number> {
  const { retentionMs, batchSize } = request
  const result = await db
    .deleteFrom('processed_events')
    .where('event_id', 'in', (eb) =>
      eb
        .selectFrom('processed_events')
        .select('event_id')
        .where('received_at', '<', receivedBefore(retentionMs))
        .orderBy('received_at')
        .limit(batchSize)
        .forUpdate()
        .skipLocked(),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
