import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/**
 * One stored subscription as a relay needs it, with its secrets still in force: an enabled one, or one whose
 * backfill runs (which a relay copies for, enabled or not, and serves only once it is done).
 */
export interface SubscriptionTargetRow {
  readonly id: string
  readonly enabled: boolean
  /** Its backfill (`startAt: 'earliest'`) runs: its lanes are not claimed until it is done. */
  readonly backfilling: boolean
  readonly name: string | null
  readonly url: string
  readonly onExhausted: 'skip' | 'block' | null
  readonly retrySchedule: readonly number[] | null
  readonly requestTimeoutMs: number | null
  /** Current secret first, then those still inside their rotation overlap. */
  readonly secrets: readonly string[]
  /** Its endpoint breaker is open: lanes are not claimed, and those claimed before are handed back. */
  readonly breakerOpen: boolean
  /** Its `maxInFlight`, counted across relays by the claim (null: none). */
  readonly maxInFlight: number | null
  /** It has a `ratePerSecond` (a token bucket on its row, spent by the claim). */
  readonly rateLimited: boolean
  /** Its endpoint's last attempts failed (its failure streak, written by every relay, is above zero). */
  readonly failing: boolean
}

/**
 * The enabled stored subscriptions and those whose backfill runs (all, or those in `ids`) with the secrets a relay signs with now: the current
 * one and any whose rotation overlap has not ended, in database time.
 */
export async function selectSubscriptionTargets(
  ctx: SqlContext,
  request: { readonly ids: readonly string[] | undefined },
): Promise<SubscriptionTargetRow[]> {
  const { db, schema } = ctx
  const only = request.ids === undefined ? sql`TRUE` : sql`s.id = ANY(${request.ids}::uuid[])`
  // Raw SQL: an aggregate over a filtered join, ordered inside array_agg.
  const { rows } = await sql<{
    id: string
    enabled: boolean
    backfilling: boolean
    name: string | null
    url: string
    on_exhausted: 'skip' | 'block' | null
    retry_schedule: string[] | null
    request_timeout_ms: number | null
    secrets: string[] | null
    breaker_open: boolean
    max_in_flight: number | null
    rate_limited: boolean
    failing: boolean
  }>`
    SELECT s.id, s.state = 'enabled' AS enabled, s.backfill_state IS NOT DISTINCT FROM 'running' AS backfilling,
           s.name, s.url, s.on_exhausted, s.retry_schedule, s.request_timeout_ms,
           s.breaker_state = 'open' AS breaker_open, s.max_in_flight, s.rate_per_second IS NOT NULL AS rate_limited,
           s.failure_streak > 0 AS failing,
           array_agg(k.secret ORDER BY k.expires_at IS NOT NULL, k.created_at DESC)
             FILTER (WHERE k.secret IS NOT NULL) AS secrets
    FROM ${sql.id(schema, 'outbox_subscription')} s
    LEFT JOIN ${sql.id(schema, 'outbox_subscription_secret')} k
      ON k.subscription_id = s.id AND (k.expires_at IS NULL OR k.expires_at > now())
    WHERE (s.state = 'enabled' OR s.backfill_state = 'running') AND s.id <> ${IMPLICIT_SUBSCRIPTION_ID}::uuid AND ${only}
    GROUP BY s.id`.execute(db)
  return rows.map((row) => ({
    id: row.id,
    enabled: row.enabled,
    backfilling: row.backfilling,
    name: row.name,
    url: row.url,
    onExhausted: row.on_exhausted,
    retrySchedule: row.retry_schedule?.map(Number) ?? null,
    requestTimeoutMs: row.request_timeout_ms,
    secrets: row.secrets ?? [],
    breakerOpen: row.breaker_open,
    maxInFlight: row.max_in_flight,
    rateLimited: row.rate_limited,
    failing: row.failing,
  }))
}
