import { sql } from 'kysely'
import { ASYNC_COMMIT } from './async-commit.js'
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
 * Records a failed attempt on a lane's head, sets the whole lane's due time to `delayMs` from now (database time)
 * and releases the lane — one statement, fenced by the claim token (a stale owner changes nothing). The head's
 * first failure time is kept (set by its first failed attempt), for the give-up horizon.
 *
 * Committed without waiting for the WAL flush ({@link ASYNC_COMMIT}): a lost schedule is a lease that ends.
 *
 * A provisional takeover charge (see `provisional`) is recorded apart from the attempts, which it never exhausts.
 *
 * Any answer but a 409 ends a 409 park: the lane is in ordinary retries now, so it is no longer reported blocked,
 * and a later 409 starts its park delay afresh.
 *
 * The head and the rows behind it are updated by separate sub-statements that never touch the same row (one
 * statement may not modify a row twice). Why every pending row of the lane moves, not just the head: the claim starts from the due index, and rows
 * behind a waiting head must not look due, or every claim would scan them and find the head not ready.
 */
export async function scheduleRetry(
  ctx: SqlContext,
  request: {
    readonly failure: FailedAttempt
    readonly delayMs: number
    readonly health?: FailureHealth
    /**
     * A takeover charge that proved nothing (migration 0019): counted in `takeover_charges`, not in `attempts` (give
     * `failure.attempts` unchanged); `suspect` when the charges bring the head to its attempts, so that every further
     * attempt of it is made alone (the lane is watched, so its next owner records the start and sees the flag).
     */
    readonly provisional?: { readonly suspect: boolean }
  },
): Promise<{ readonly owned: boolean } & HealthOutcome> {
  const { db, schema } = ctx
  const { failure, delayMs } = request
  const charges = request.provisional === undefined ? 0 : 1
  const suspect = request.provisional?.suspect === true
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const health = request.health === undefined ? sql`` : failureHealthCte(schema, request.health)
  const healthColumns = request.health === undefined ? sql`NULL AS health` : HEALTH_COLUMNS
  // Raw SQL: three data-modifying CTEs (release, record the attempt, move the lane's rows) in one fenced statement.
  const { rows } = await sql<{ owned: boolean; health: unknown }>`
    WITH released AS (
      UPDATE ${lane}
      SET claim_token = NULL, leased_until = NULL,
          blocked_reason = CASE WHEN blocked_reason = 'conflict' THEN NULL ELSE blocked_reason END,
          blocked_at = CASE WHEN blocked_reason = 'conflict' THEN NULL ELSE blocked_at END,
          conflict_count = 0, watch_starts = watch_starts OR ${suspect}
      WHERE claim_token = ${failure.claimToken}
      RETURNING subscription_id, aggregate_type, aggregate_id
    )${health}${attemptLogCte(schema, failure.log, 'failed', failure.charged === true)}, head AS (
      UPDATE ${outbox} o
      SET attempts = ${failure.attempts}, takeover_charges = o.takeover_charges + ${charges},
          suspect = o.suspect OR ${suspect}, last_status = ${failure.httpStatus}, last_error = ${failure.error},
          last_attempt_at = ${failure.attemptedAt}, first_failed_at = coalesce(o.first_failed_at, now()),
          available_at = now() + ${delayMs} * interval '1 millisecond'
      FROM released
      WHERE o.id = ${failure.id} AND o.status = 'pending'
    ), lane_rows AS (
      UPDATE ${outbox} o SET available_at = now() + ${delayMs} * interval '1 millisecond'
      FROM released
      WHERE o.subscription_id = released.subscription_id AND o.aggregate_type = released.aggregate_type
        AND o.aggregate_id = released.aggregate_id
        AND o.status = 'pending' AND o.id <> ${failure.id}
    )
    SELECT EXISTS (SELECT 1 FROM released) AS owned, ${healthColumns}, ${ASYNC_COMMIT}`.execute(db)
  return { owned: rows[0]?.owned === true, ...healthOutcome(rows[0]?.health) }
}
