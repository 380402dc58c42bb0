import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** A subscription whose backfill (`startAt: 'earliest'`) runs, with its progress. */
export interface RunningBackfillRow {
  id: string
  name: string | null
  aggregates_done: string
  aggregates_total: string | null
  events: string
  waiting_since: Date | null
}

/**
 * The subscriptions whose backfill runs. Their pending rows are held back on purpose (no relay claims them until the
 * copy is done), so checks report them as such rather than as overdue. The backfill state is set on few rows and
 * read rarely: a scan of the subscription table, which holds one row per endpoint.
 */
export async function selectRunningBackfills(ctx: SqlContext): Promise<RunningBackfillRow[]> {
  const { db, schema } = ctx
  const { rows } = await sql<RunningBackfillRow>`
    SELECT s.id, s.name, s.backfill_aggregates_done AS aggregates_done,
           s.backfill_aggregates_total AS aggregates_total, s.backfill_events AS events,
           s.backfill_waiting_since AS waiting_since
    FROM ${sql.id(schema, 'outbox_subscription')} s
    WHERE s.backfill_state = 'running'
    ORDER BY s.name COLLATE "C", s.id`.execute(db)
  return rows
}
