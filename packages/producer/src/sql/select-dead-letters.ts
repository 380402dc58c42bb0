import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

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
  ctx: SqlContext,
  page: {
    readonly limit: number
    readonly after?: { readonly deadAt: string; readonly id: string } | undefined
  },
): Promise<DeadLetterRow[]> {
  const { limit, after } = page
  let query = ctx.db
    .withSchema(ctx.schema)
    .selectFrom('outbox')
    .select([
      'id',
      'event_id',
      'aggregate_type',
      'aggregate_id',
      'sequence',
      'event_type',
      'attempts',
      'last_status',
      'last_error',
      'last_attempt_at',
      'created_at',
      'dead_at',
      sql<string>`to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('dead_at_cursor'),
    ])
    // A literal, as the partial index on dead rows is written: its predicate is then provable in any plan.
    .where('status', '=', sql.lit('dead'))
  if (after) {
    query = query.where((eb) =>
      eb(
        eb.refTuple('dead_at', 'id'),
        '>',
        eb.tuple(sql`${after.deadAt}::timestamptz`, sql`${after.id}::bigint`),
      ),
    )
  }
  return (await query.orderBy('dead_at').orderBy('id').limit(limit).execute()) as DeadLetterRow[]
}
