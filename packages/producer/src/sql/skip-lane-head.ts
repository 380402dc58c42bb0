import { sql } from 'kysely'
import type { LaneKey } from './lock-lane.js'
import type { TransactionContext } from './sql-context.js'

/**
 * Dead-letters a lane's head by an operator's decision and moves the lane on, under the locks of
 * `lockLaneForAction` (the caller refuses a lane blocked as exhausted first). The head becomes a dead letter like
 * one exhausted under `onExhausted: 'skip'` — kept, listed and redrivable, its attempts and last status as they
 * were, `last_error` saying who skipped it and why — and the lane is left as `deadLetterHead` leaves it under
 * `'skip'`: the rows behind become due now, a 409 park ends (its head is gone), `conflict_count` restarts and the
 * lane is no longer watched for takeovers (its suspect head is settled). Returns the skipped event and how many
rows behind it are now due (all of the lane's pending rows); undefined when nothing is pending.
 */
export async function skipLaneHead(
  ctx: TransactionContext,
  key: LaneKey,
  request: { readonly error: string },
): Promise<{ eventId: string; sequence: number; released: number } | undefined> {
  const { db: trx, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const where = (alias: string) =>
    sql`${sql.id(alias)}.subscription_id = ${key.subscriptionId}::uuid AND ${sql.id(alias)}.aggregate_type = ${key.aggregateType}
      AND ${sql.id(alias)}.aggregate_id = ${key.aggregateId}`
  // Raw SQL: three data-modifying CTEs (the head, the rows behind, the lane) in one statement, as deadLetterHead.
  const { rows } = await sql<{ event_id: string; sequence: string; released: string }>`
    WITH head AS (
      SELECT o.id FROM ${outbox} o WHERE ${where('o')} AND o.status = 'pending' ORDER BY o.sequence LIMIT 1
    ), dead AS (
      UPDATE ${outbox} o
      SET status = 'dead', dead_at = now(), first_failed_at = coalesce(o.first_failed_at, now()),
          last_error = ${request.error}
      FROM head WHERE o.id = head.id
      RETURNING o.event_id, o.sequence
    ), behind AS (
      UPDATE ${outbox} o SET available_at = now()
      WHERE ${where('o')} AND o.status = 'pending' AND o.id <> (SELECT id FROM head)
      RETURNING 1
    ), moved AS (
      UPDATE ${lane} l
      SET blocked_reason = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
          blocked_at = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END,
          conflict_count = 0, watch_starts = false
      WHERE ${where('l')} AND EXISTS (SELECT 1 FROM head)
    )
    SELECT dead.event_id, dead.sequence, (SELECT count(*) FROM behind) AS released FROM dead`.execute(trx)
  const row = rows[0]
  return row === undefined
    ? undefined
    : { eventId: row.event_id, sequence: Number(row.sequence), released: Number(row.released) }
}
