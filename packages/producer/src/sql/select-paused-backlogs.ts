import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/** A disabled stored subscription and how many pending events it holds. */
export interface PausedBacklogRow {
  id: string
  name: string | null
  pending: string
}

/**
 * The disabled stored subscriptions that hold pending events, by name: no relay claims those events until the
 * subscription is enabled, and they hold back pruning meanwhile. Counted on the due index, which leads with the
 * subscription and holds only pending rows, so a disabled subscription costs one short index range.
 */
export async function selectPausedBacklogs(ctx: SqlContext): Promise<PausedBacklogRow[]> {
  const { db, schema } = ctx
  // Raw SQL: a correlated count per subscription row, kept on the partial index's predicate.
  const { rows } = await sql<PausedBacklogRow>`
    SELECT s.id, s.name, b.pending
    FROM ${sql.id(schema, 'outbox_subscription')} s
    CROSS JOIN LATERAL (
      SELECT count(*) AS pending FROM ${sql.id(schema, 'outbox')} o
      WHERE o.subscription_id = s.id AND o.status = 'pending'
    ) b
    WHERE s.state = 'disabled' AND s.id <> ${IMPLICIT_SUBSCRIPTION_ID}::uuid AND b.pending > 0
    ORDER BY s.name COLLATE "C", s.id`.execute(db)
  return rows
}
