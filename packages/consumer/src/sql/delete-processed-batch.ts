import { type Kysely, sql } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/**
 * The cut-off of a retention, from the database clock (`now()`, the clock that wrote `received_at`), never the
 * application's: rows received before it are past retention.
 */
export function receivedBefore(retentionMs: number) {
  return sql<Date>`now() - make_interval(secs => ${retentionMs / 1000}::double precision)`
}

/**
 * Deletes up to `batchSize` of the oldest `processed_events` rows received more than `retentionMs` ago — of one
 * `source` when given, else of every source; returns how many it deleted.
 *
 * Shaped for a live table: the subquery walks `processed_events_received_at_idx` oldest first and stops at
 * `LIMIT`, so each batch is a short transaction that holds few locks, instead of one `DELETE … WHERE received_at <
 * …` that could lock millions of rows and bloat WAL in one go. `SKIP LOCKED` lets two pruners run side by side
 * without waiting on each other. The cut-off is computed from the database clock (`now()`, the same clock that
 * wrote `received_at`), never the application's. The rows are matched by the whole key `(source, event_id)`: an id
 * alone may also be another source's row, still within its retention. Cursors are a different table and are never
 * touched. With a `source`, the walk skips other sources' rows on the same index (no index leads with `source`:
 * one more index would cost every delivery an insert).
 */
export async function deleteProcessedBatch(
  db: Kysely<ConsumerDatabase>,
  request: { readonly retentionMs: number; readonly batchSize: number; readonly source?: string | undefined },
): Promise<number> {
  const { retentionMs, batchSize, source } = request
  const result = await db
    .deleteFrom('processed_events')
    .where(
      (eb) => eb.refTuple('source', 'event_id'),
      'in',
      (eb) => {
        const expired = eb
          .selectFrom('processed_events')
          .select(['source', 'event_id'])
          .where('received_at', '<', receivedBefore(retentionMs))
        return (source === undefined ? expired : expired.where('source', '=', source))
          .orderBy('received_at')
          .limit(batchSize)
          .forUpdate()
          .skipLocked()
          .$asTuple('source', 'event_id')
      },
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
