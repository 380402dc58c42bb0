import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** One bucket as PostgreSQL returns it: its index (epoch ms ÷ bucket width) and how many rows were sent in it. */
export interface ThroughputRow {
  bucket: string
  sent: string
}

/**
 * Counts rows marked sent per time bucket over the last `buckets` buckets, the current (partial) one last, with a
 * zero row for every bucket nothing was sent in (a chart's x axis needs them all).
 *
 * The buckets are aligned on the epoch and cut by the DATABASE's clock (`now()`), as `sent_at` is written by
 * `mark-sent.ts` with `now()`: every console replica asking at the same moment gets the same buckets, whatever its own
 * clock says. The scan is a range on `outbox_sent_idx` (partial, `status = 'sent'`, on `sent_at`), so it reads
 * only the window's rows however large the retained history is; rows pruned already are simply not counted.
 */
export async function selectThroughput(
  ctx: SqlContext,
  request: {
    readonly bucketMs: number
    readonly buckets: number
    readonly subscriptionId: string | undefined
  },
): Promise<ThroughputRow[]> {
  const { db, schema } = ctx
  const { bucketMs, buckets, subscriptionId } = request
  const outbox = sql.id(schema, 'outbox')
  const onlySubscription =
    subscriptionId === undefined ? sql`` : sql`AND o.subscription_id = ${subscriptionId}::uuid`
  // Raw SQL: generate_series joined to a grouped range count, which the builder does not shape readably.
  const { rows } = await sql<ThroughputRow>`
    WITH span AS (
      SELECT floor(extract(epoch FROM now()) * 1000 / ${bucketMs}::bigint)::bigint AS last_bucket
    ), counts AS (
      SELECT floor(extract(epoch FROM o.sent_at) * 1000 / ${bucketMs}::bigint)::bigint AS bucket, count(*) AS sent
      FROM ${outbox} o, span
      WHERE o.status = 'sent'
        AND o.sent_at >= to_timestamp((span.last_bucket - ${buckets}::bigint + 1) * ${bucketMs}::bigint / 1000.0)
        ${onlySubscription}
      GROUP BY 1
    )
    SELECT b.bucket, coalesce(c.sent, 0) AS sent
    FROM span, generate_series(span.last_bucket - ${buckets}::bigint + 1, span.last_bucket) AS b(bucket)
    LEFT JOIN counts c ON c.bucket = b.bucket
    ORDER BY b.bucket`.execute(db)
  return rows
}
