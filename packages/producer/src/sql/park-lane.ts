import { sql } from 'kysely'
import { ASYNC_COMMIT } from './async-commit.js'
import { type AttemptRecord, attemptLogCte } from './delivery-attempt-log.js'
import type { SqlContext } from './sql-context.js'

/**
 * Parks a lane after a 409 (the consumer waits for an earlier sequence it never got): NOT an attempt — the head's
 * attempts stay, though the delivery log records the request — but the lane is reported blocked and waits a capped, growing delay before it tries again,
 * because waiting alone never heals the gap. Releases the lane; fenced by the claim token. Committed without waiting
 * for the WAL flush ({@link ASYNC_COMMIT}): a lost park is a lease that ends.
 */
export async function parkLane(
  ctx: SqlContext,
  park: {
    readonly claimToken: string
    /** Row id of the head answered 409. */
    readonly id: string
    readonly error: string
    readonly attemptedAt: Date
    readonly delayMs: number
    /** The 409 for the delivery log; absent when the relay does not log failures. */
    readonly log?: AttemptRecord
  },
): Promise<boolean> {
  const { db, schema } = ctx
  const { delayMs } = park
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  // Raw SQL: data-modifying CTEs (park, record the answer and log it, move the lane's rows) in one fenced statement.
  const { rows } = await sql<{ owned: boolean }>`
    WITH released AS (
      UPDATE ${lane}
      SET claim_token = NULL, leased_until = NULL, blocked_reason = 'conflict',
          blocked_at = coalesce(blocked_at, now()), conflict_count = conflict_count + 1
      WHERE claim_token = ${park.claimToken}
      RETURNING subscription_id, aggregate_type, aggregate_id
    )${attemptLogCte(schema, park.log, 'conflict')}, head AS (
      UPDATE ${outbox} o
      SET last_status = 409, last_error = ${park.error}, last_attempt_at = ${park.attemptedAt},
          available_at = now() + ${delayMs} * interval '1 millisecond'
      FROM released
      WHERE o.id = ${park.id} AND o.status = 'pending'
    ), lane_rows AS (
      UPDATE ${outbox} o SET available_at = now() + ${delayMs} * interval '1 millisecond'
      FROM released
      WHERE o.subscription_id = released.subscription_id AND o.aggregate_type = released.aggregate_type
        AND o.aggregate_id = released.aggregate_id
        AND o.status = 'pending' AND o.id <> ${park.id}
    )
    SELECT EXISTS (SELECT 1 FROM released) AS owned, ${ASYNC_COMMIT}`.execute(db)
  return rows[0]?.owned === true
}
