import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** Raw counters behind `stats`, as PostgreSQL returns them. */
export interface StatsRow {
  lag_seconds: number | string | null
  pending: string
  struggling: string
  dead: string
  in_flight: string
  blocked: string
}

/**
 * Reads every stats figure in one round trip and one snapshot, so the numbers agree with each other.
 *
 * Pending-row figures come from the partial pending index (small however many sent rows exist); `dead` from the
 * partial dead index; lane figures from the lane table's partial indexes. `struggling` counts rows with three or
 * more attempts: only a lane's head ever accumulates attempts, so that is the number of struggling heads.
 */
export async function readStats(
  ctx: SqlContext,
  request: { readonly strugglingAttempts: number },
): Promise<StatsRow> {
  const { db, schema } = ctx
  const { strugglingAttempts } = request
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  // Raw SQL: six scalar subqueries over two tables in one statement (one snapshot), not a read the builder shapes.
  const { rows } = await sql<StatsRow>`
    SELECT
      (SELECT extract(epoch FROM now() - min(created_at)) FROM ${outbox} WHERE status = 'pending') AS lag_seconds,
      (SELECT count(*) FROM ${outbox} WHERE status = 'pending') AS pending,
      (SELECT count(*) FROM ${outbox} WHERE status = 'pending' AND attempts >= ${strugglingAttempts}) AS struggling,
      (SELECT count(*) FROM ${outbox} WHERE status = 'dead') AS dead,
      (SELECT count(*) FROM ${lane} WHERE claim_token IS NOT NULL AND leased_until > now()) AS in_flight,
      (SELECT count(*) FROM ${lane} WHERE blocked_reason IS NOT NULL) AS blocked`.execute(db)
  return rows[0]!
}
