import { type Kysely, sql } from 'kysely'

/** A dead-letter row as stored. */
export interface DeadLetterRow {
  id: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: string
  event_type: string
  attempts: number
  last_status: number | null
  last_error: string | null
  last_attempt_at: Date | null
  created_at: Date
  dead_at: Date
  /** `dead_at` in UTC to the microsecond, for the page cursor. */
  dead_at_cursor: string
}

/**
 * Lists dead letters oldest first, keyset-paginated on `(dead_at, id)` so pages stay stable while new dead letters
 * arrive; served by the partial index on `dead_at`.
 *
 * Why the cursor carries `dead_at` as microsecond text: a JavaScript Date keeps milliseconds, so a cursor built
 * from it sorts BEFORE the row it came from and the next page would repeat that row forever.
 */
export async function selectDeadLetters(
  db: Kysely<any>,
  schema: string,
  limit: number,
  after?: { deadAt: string; id: string },
): Promise<DeadLetterRow[]> {
  const outbox = sql.id(schema, 'outbox')
  const cursor = after ? sql`AND (dead_at, id) > (${after.deadAt}::timestamptz, ${after.id}::bigint)` : sql``
  const { rows } = await sql<DeadLetterRow>`
    SELECT id, event_id, aggregate_type, aggregate_id, sequence, event_type, attempts, last_status, last_error,
           last_attempt_at, created_at, dead_at,
           to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS dead_at_cursor
    FROM ${outbox}
    WHERE status = 'dead' ${cursor}
    ORDER BY dead_at, id
    LIMIT ${limit}`.execute(db)
  return rows
}
