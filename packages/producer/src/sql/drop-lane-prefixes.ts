import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/** One lane a drop batch cut: its highest dropped sequence and how many rows went. */
export interface DroppedLaneRow {
  aggregate_type: string
  aggregate_id: string
  through: string
  dropped: string
}

/**
 * Drops, under the locks of `lockLapsedSubscription` and `lockLanesForDrop`, a prefix of each given lane of a
 * disabled subscription — every pending row with a sequence at or below the lane's `upto` — at most `limit` rows in
 * all (lanes in key order, rows in sequence order, so a lane the limit cuts short still loses a prefix only), and
 * leaves each cut lane as a lane whose head is new:
 *
 * - The DELETE re-checks, in its own statement, that the subscription is still disabled and each row still pending:
 *   a row a relay's late outcome marked meanwhile is not a drop, and nothing goes if the subscription was enabled.
 * - The lane row: an expired claim is cleared with its takeover watch (`started_token`, `watch_starts`) — the
 *   request it may have started was for a head that is gone, and charging the new head for it would be wrong —
 *   `conflict_count` restarts, and a 409 park ends (the head the consumer refused is gone; the new head has had no
 *   answer). A block by an exhausted dead letter stays: that dead letter is not pending and never dropped here, and
 *   only its redrive or an unblock may resume the lane.
 * - The rows left in a lane that is not blocked become due by now at the latest: they waited behind the backoff or
 *   park of a head that is gone (rows at or before now keep their time, so they stay in order).
 * - The subscription's `dropped_deliveries` grows by the rows dropped, and `last_dropped_at` is now.
 *
 * One statement (data-modifying CTEs on one snapshot), so a batch's counter always matches what it dropped. The
 * rows behind the cut are told apart by sequence (`> through`), never by re-reading the deleted ones.
 */
export async function dropLanePrefixes(
  ctx: TransactionContext,
  request: {
    readonly subscriptionId: string
    readonly lanes: readonly {
      readonly aggregateType: string
      readonly aggregateId: string
      readonly upto: string
    }[]
    readonly limit: number
  },
): Promise<DroppedLaneRow[]> {
  const { db: trx, schema } = ctx
  const { subscriptionId, lanes, limit } = request
  if (lanes.length === 0) return []
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const subscription = sql.id(schema, 'outbox_subscription')
  // Raw SQL: data-modifying CTEs over an unnest of the locked lanes, which the builder has no form for.
  const { rows } = await sql<DroppedLaneRow>`
    WITH target AS (
      SELECT * FROM unnest(
        ${lanes.map((l) => l.aggregateType)}::text[], ${lanes.map((l) => l.aggregateId)}::text[],
        ${lanes.map((l) => l.upto)}::bigint[]
      ) AS t(aggregate_type, aggregate_id, upto)
    ), still_disabled AS (
      SELECT s.id FROM ${subscription} s WHERE s.id = ${subscriptionId}::uuid AND s.state = 'disabled'
    ), doomed AS (
      SELECT o.id FROM ${outbox} o
      JOIN target t ON t.aggregate_type = o.aggregate_type AND t.aggregate_id = o.aggregate_id
      WHERE o.subscription_id = ${subscriptionId}::uuid AND o.status = 'pending' AND o.sequence <= t.upto
      ORDER BY o.aggregate_type, o.aggregate_id, o.sequence
      LIMIT ${limit}
    ), dropped AS (
      DELETE FROM ${outbox} o USING doomed d
      WHERE o.id = d.id AND o.status = 'pending' AND EXISTS (SELECT 1 FROM still_disabled)
      RETURNING o.aggregate_type, o.aggregate_id, o.sequence
    ), cut AS (
      SELECT d.aggregate_type, d.aggregate_id, max(d.sequence) AS through, count(*) AS dropped
      FROM dropped d GROUP BY d.aggregate_type, d.aggregate_id
    ), moved AS (
      UPDATE ${lane} l
      SET claim_token = NULL, leased_until = NULL, started_token = NULL, watch_starts = false, conflict_count = 0,
          blocked_reason = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
          blocked_at = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END
      FROM cut c
      WHERE l.subscription_id = ${subscriptionId}::uuid AND l.aggregate_type = c.aggregate_type
        AND l.aggregate_id = c.aggregate_id
      RETURNING l.aggregate_type, l.aggregate_id, l.blocked_reason, c.through
    ), released AS (
      UPDATE ${outbox} o SET available_at = now()
      FROM moved m
      WHERE o.subscription_id = ${subscriptionId}::uuid AND o.aggregate_type = m.aggregate_type
        AND o.aggregate_id = m.aggregate_id AND o.status = 'pending' AND o.sequence > m.through
        AND o.available_at > now() AND m.blocked_reason IS DISTINCT FROM 'exhausted'
    ), counted AS (
      UPDATE ${subscription} s
      SET dropped_deliveries = s.dropped_deliveries + (SELECT count(*) FROM dropped), last_dropped_at = now()
      WHERE s.id = ${subscriptionId}::uuid AND EXISTS (SELECT 1 FROM dropped)
    )
    SELECT c.aggregate_type, c.aggregate_id, c.through, c.dropped FROM cut c
    ORDER BY c.aggregate_type, c.aggregate_id`.execute(trx)
  return rows
}
