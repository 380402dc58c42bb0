import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/** A lane the drop batch holds. */
export interface LockedDropLaneRow {
  aggregate_type: string
  aggregate_id: string
}

/**
 * Takes the lanes a drop batch will cut, in the caller's transaction, the way operator actions take a lane (see
 * `lockLaneForAction`): each aggregate's COUNTER row first — every enqueue of the aggregate holds it until it
 * commits, so none is open while rows go, and no enqueue commits behind the cut unseen — then the LANE row — a claim
 * and a redrive lock it too. Both with SKIP LOCKED and without waiting: a prune must not stall behind an open
 * application transaction (nor stall it), and a lane it skips is dropped by a later run. A lane under a live lease
 * is left out as well: its relay may be mid-request, and its outcome must find its rows.
 *
 * Order: the counters are locked in key order, as `enqueueMany` and the actions lock them; with SKIP LOCKED it
 * could not deadlock anyway, since nothing here waits.
 */
export async function lockLanesForDrop(
  ctx: TransactionContext,
  request: {
    readonly subscriptionId: string
    readonly lanes: readonly { readonly aggregateType: string; readonly aggregateId: string }[]
  },
): Promise<LockedDropLaneRow[]> {
  const { db: trx, schema } = ctx
  const { subscriptionId, lanes } = request
  if (lanes.length === 0) return []
  const counter = sql.id(schema, 'outbox_counter')
  const lane = sql.id(schema, 'outbox_lane')
  // Raw SQL: two SKIP LOCKED row locks in one statement, the counters' in a CTE that runs first.
  const { rows } = await sql<LockedDropLaneRow>`
    WITH wanted AS (
      SELECT * FROM unnest(${lanes.map((l) => l.aggregateType)}::text[], ${lanes.map((l) => l.aggregateId)}::text[])
        AS w(aggregate_type, aggregate_id)
    ), counters AS MATERIALIZED (
      SELECT c.aggregate_type, c.aggregate_id FROM ${counter} c
      JOIN wanted w ON w.aggregate_type = c.aggregate_type AND w.aggregate_id = c.aggregate_id
      ORDER BY c.aggregate_type, c.aggregate_id
      FOR UPDATE OF c SKIP LOCKED
    )
    SELECT l.aggregate_type, l.aggregate_id FROM ${lane} l
    JOIN counters c ON c.aggregate_type = l.aggregate_type AND c.aggregate_id = l.aggregate_id
    WHERE l.subscription_id = ${subscriptionId}::uuid
      AND NOT (l.claim_token IS NOT NULL AND l.leased_until > now())
    ORDER BY l.aggregate_type, l.aggregate_id
    FOR UPDATE OF l SKIP LOCKED`.execute(trx)
  return rows
}
