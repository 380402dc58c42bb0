import { sql } from 'kysely'
import { attemptLogCte } from './delivery-attempt-log.js'
import {
  type FailureHealth,
  failureHealthCte,
  HEALTH_COLUMNS,
  type HealthOutcome,
  healthOutcome,
} from './endpoint-health.js'
import type { FailedAttempt } from './failed-attempt.js'
import type { SqlContext } from './sql-context.js'

/**
 * Dead-letters a lane's head whose attempts are used up and releases the lane, fenced by the claim token.
 *
 * `'skip'`: the rows behind become due now, so the lane moves on at the next claim. `'block'`: the lane is marked
 * blocked and its rows pushed to `'infinity'` (out of the due index) until a redrive of this dead letter — the
 * lane's blocker, its dead row with the highest sequence — resumes it in order. Either way a 409 park ends (the
 * parked head is gone) and the lane is no longer watched for takeovers (its suspect head is settled).
 */
export async function deadLetterHead(
  ctx: SqlContext,
  request: {
    readonly failure: FailedAttempt
    readonly onExhausted: 'skip' | 'block'
    readonly health?: FailureHealth
  },
): Promise<{ readonly owned: boolean } & HealthOutcome> {
  const { db, schema } = ctx
  const { failure, onExhausted } = request
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const block = onExhausted === 'block'
  const health = request.health === undefined ? sql`` : failureHealthCte(schema, request.health)
  const healthColumns = request.health === undefined ? sql`NULL AS health` : HEALTH_COLUMNS
  // Raw SQL: three data-modifying CTEs (release, dead-letter, move the lane's rows) in one fenced statement.
  const { rows } = await sql<{ owned: boolean; health: unknown }>`
    WITH released AS (
      UPDATE ${lane}
      SET claim_token = NULL, leased_until = NULL,
          blocked_reason = CASE WHEN ${block} THEN 'exhausted' WHEN blocked_reason = 'conflict' THEN NULL
                                ELSE blocked_reason END,
          blocked_at = CASE WHEN ${block} THEN now() WHEN blocked_reason = 'conflict' THEN NULL ELSE blocked_at END,
          conflict_count = 0, watch_starts = false
      WHERE claim_token = ${failure.claimToken}
      RETURNING subscription_id, aggregate_type, aggregate_id
    )${health}${attemptLogCte(schema, failure.log, 'dead', failure.charged === true)}, head AS (
      UPDATE ${outbox} o
      SET status = 'dead', dead_at = now(), attempts = ${failure.attempts}, suspect = false, last_status = ${failure.httpStatus},
          last_error = ${failure.error}, last_attempt_at = ${failure.attemptedAt},
          first_failed_at = coalesce(o.first_failed_at, now())
      FROM released
      WHERE o.id = ${failure.id} AND o.status = 'pending'
    ), lane_rows AS (
      UPDATE ${outbox} o
      SET available_at = CASE WHEN ${block} THEN 'infinity'::timestamptz ELSE now() END
      FROM released
      WHERE o.subscription_id = released.subscription_id AND o.aggregate_type = released.aggregate_type
        AND o.aggregate_id = released.aggregate_id
        AND o.status = 'pending' AND o.id <> ${failure.id}
    )
    SELECT EXISTS (SELECT 1 FROM released) AS owned, ${healthColumns}`.execute(db)
  return { owned: rows[0]?.owned === true, ...healthOutcome(rows[0]?.health) }
}
