import { sql } from 'kysely'
import type { LaneKey } from './lock-lane.js'
import type { TransactionContext } from './sql-context.js'

/**
 * Lifts a lane's 409 park under the locks of `lockLaneForAction`: the park marker goes (`blocked_reason`,
 * `blocked_at`, and `conflict_count` back to 0, so the next 409 starts the park backoff from its floor), and the
 * lane's pending rows waiting out the park become due now — the head first of them, so the next claim sends it at
 * once. `parkLane` pushed the head AND the rows behind it to the park's end, so all of them are released, not only
 * the head (the claim takes the head with the contiguous rows behind it). Rows already due keep their time. Returns
 * how many rows became due.
 */
export async function clearConflictPark(ctx: TransactionContext, key: LaneKey): Promise<number> {
  const { db: trx, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  // Raw SQL: the same lane predicate on two tables, as `releaseBlockedLane` writes it.
  await sql`UPDATE ${lane} l SET blocked_reason = NULL, blocked_at = NULL, conflict_count = 0
    WHERE l.subscription_id = ${key.subscriptionId}::uuid AND l.aggregate_type = ${key.aggregateType}
      AND l.aggregate_id = ${key.aggregateId} AND l.blocked_reason = 'conflict'`.execute(trx)
  const released = await sql`UPDATE ${outbox} o SET available_at = now()
    WHERE o.subscription_id = ${key.subscriptionId}::uuid AND o.aggregate_type = ${key.aggregateType}
      AND o.aggregate_id = ${key.aggregateId} AND o.status = 'pending' AND o.available_at > now()`.execute(
    trx,
  )
  return Number(released.numAffectedRows ?? 0n)
}
