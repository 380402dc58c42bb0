import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'
import { receivedBefore } from './delete-processed-batch.js'

/**
 * Whether any `processed_events` row (of one `source` when given) is older than `retentionMs`: the probe
 * `pruneProcessed` runs when its batch budget ran out on a full batch, so `caughtUp` says whether rows past
 * retention are left, not whether the last batch happened to be short (a table holding exactly
 * `maxBatches × batchSize` expired rows is caught up).
 *
 * One probe on `processed_events_received_at_idx` (`LIMIT 1` on the oldest row), the cut-off from the database
 * clock as `deleteProcessedBatch` computes it.
 */
export async function hasExpiredProcessed(
  db: Kysely<ConsumerDatabase>,
  retentionMs: number,
  source?: string,
): Promise<boolean> {
  const expired = db
    .selectFrom('processed_events')
    .select('event_id')
    .where('received_at', '<', receivedBefore(retentionMs))
  const row = await (source === undefined ? expired : expired.where('source', '=', source))
    .limit(1)
    .executeTakeFirst()
  return row !== undefined
}
