import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/** A disabled stored subscription, how many pending events it holds, and what the disabled retention took. */
export interface PausedBacklogRow {
  id: string
  name: string | null
  pending: string
  disabled_at: Date | null
  oldest_pending_at: Date | null
  dropped_deliveries: string
  last_dropped_at: Date | null
}

/**
 * The disabled stored subscriptions that hold pending events or lost some to the disabled retention, by name: no
 * relay claims those events until the subscription is enabled, they hold back pruning meanwhile, and prune drops
 * those held past the disabled retention (the oldest pending enqueue time and `disabled_at` say when). Counted on the
 * due index, which leads with the subscription and holds only pending rows, so a disabled subscription costs one
 * short index range (plus its rows' enqueue times, read from the table).
 */
export async function selectPausedBacklogs(ctx: SqlContext): Promise<PausedBacklogRow[]> {
  const { db, schema } = ctx
  // Raw SQL: a correlated count per subscription row, kept on the partial index's predicate.
  const { rows } = await sql<PausedBacklogRow>`
    SELECT s.id, s.name, b.pending, s.disabled_at, b.oldest_pending_at, s.dropped_deliveries, s.last_dropped_at
    FROM ${sql.id(schema, 'outbox_subscription')} s
    CROSS JOIN LATERAL (
      SELECT count(*) AS pending, min(o.created_at) AS oldest_pending_at FROM ${sql.id(schema, 'outbox')} o
      WHERE o.subscription_id = s.id AND o.status = 'pending'
    ) b
    WHERE s.state = 'disabled' AND s.id <> ${IMPLICIT_SUBSCRIPTION_ID}::uuid
      AND (b.pending > 0 OR s.dropped_deliveries > 0)
    ORDER BY s.name COLLATE "C", s.id`.execute(db)
  return rows
}
