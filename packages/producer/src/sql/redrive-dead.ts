import { sql, type Transaction } from 'kysely'

/**
 * Puts dead letters back to pending under their lanes' row locks; returns the event ids it revived.
 *
 * Why lock the lane rows (FOR UPDATE, in sorted key order): a claim locks lane rows too, so a redrive can never
 * interleave with a claim of the same lane — the revived event joins the lane as its head for the NEXT claim, and
 * two requests of one lane are never in flight. The event keeps its id and sequence; attempts restart at zero.
 * Lanes that `onExhausted: 'block'` parked are resumed, and the rows held behind them become due again.
 */
export async function redriveDead(
  trx: Transaction<any>,
  schema: string,
  eventIds: readonly string[] | 'all',
): Promise<string[]> {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const which = eventIds === 'all' ? sql`TRUE` : sql`event_id = ANY(${eventIds}::uuid[])`
  await sql`
    SELECT 1 FROM ${lane} l
    WHERE (l.aggregate_type, l.aggregate_id) IN (
      SELECT aggregate_type, aggregate_id FROM ${outbox} WHERE status = 'dead' AND ${which}
    )
    ORDER BY l.aggregate_type, l.aggregate_id
    FOR UPDATE`.execute(trx)
  const { rows } = await sql<{ event_id: string }>`
    WITH revived AS (
      UPDATE ${outbox}
      SET status = 'pending', attempts = 0, available_at = now(), dead_at = NULL
      WHERE status = 'dead' AND ${which}
      RETURNING event_id, aggregate_type, aggregate_id
    ), resumed AS (
      UPDATE ${lane} l
      SET blocked_reason = NULL, blocked_at = NULL
      FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM revived) r
      WHERE l.aggregate_type = r.aggregate_type AND l.aggregate_id = r.aggregate_id
        AND l.blocked_reason = 'exhausted'
      RETURNING l.aggregate_type, l.aggregate_id
    ), released AS (
      UPDATE ${outbox} o
      SET available_at = now()
      FROM resumed r
      WHERE o.aggregate_type = r.aggregate_type AND o.aggregate_id = r.aggregate_id
        AND o.status = 'pending' AND o.available_at = 'infinity'
    )
    SELECT event_id FROM revived`.execute(trx)
  return rows.map((row) => row.event_id)
}
