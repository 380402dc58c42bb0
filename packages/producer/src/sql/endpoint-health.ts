import { type RawBuilder, sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { EndpointBreakerOptions } from '../options.js'
import type { SqlContext } from './sql-context.js'

/** What a failed attempt tells about its subscription's endpoint, written with the failure itself. */
export interface FailureHealth {
  /** A 5xx, a 408, a timeout or a network error: one more failure in the breaker's streak. */
  readonly countsAsFailure: boolean
  /** A `Retry-After` on 429/503, in ms: every lane of the subscription waits this long. */
  readonly throttleMs: number | undefined
  /** The relay's breaker settings; false when it has none. */
  readonly breaker: Readonly<Required<EndpointBreakerOptions>> | false
}

/**
 * A data-modifying CTE, `health`, to add after a failure statement's `released` CTE (which returns the released
 * lane's `subscription_id`): it counts the failure into the subscription's streak, opens its breaker at the
 * threshold, and throttles it on a `Retry-After`. Written in the failure's own statement, so the bookkeeping costs
 * no round trip. The implicit subscription is left alone. `health` returns `opened` (this statement opened the
 * breaker), the cool-down it set, and `open`: whether the breaker is open now, whoever opened it — so a relay that
 * did not open it learns it from its next failure there, not from its next read of the subscriptions.
 */
export function failureHealthCte(schema: string, health: FailureHealth): RawBuilder<unknown> {
  const { breaker, throttleMs } = health
  const counts = health.countsAsFailure && breaker !== false
  const threshold = breaker === false ? 0 : breaker.failures
  const cooldown = breaker === false ? 0 : breaker.cooldownMs
  // Opening: closed, and this failure reaches the threshold.
  const opening = sql`(${counts} AND s.breaker_state = 'closed' AND s.failure_streak + 1 >= ${threshold})`
  return sql`, health AS (
      UPDATE ${sql.id(schema, 'outbox_subscription')} s
      SET failure_streak = CASE WHEN ${counts} THEN s.failure_streak + 1 ELSE s.failure_streak END,
          streak_started_at = CASE WHEN ${counts} THEN coalesce(s.streak_started_at, now())
                                   ELSE s.streak_started_at END,
          breaker_state = CASE WHEN ${opening} THEN 'open' ELSE s.breaker_state END,
          breaker_opened_at = CASE WHEN ${opening} THEN now() ELSE s.breaker_opened_at END,
          breaker_cooldown_ms = CASE WHEN ${opening} THEN ${cooldown}::bigint ELSE s.breaker_cooldown_ms END,
          probe_at = CASE WHEN ${opening} THEN now() + ${cooldown} * interval '1 millisecond' ELSE s.probe_at END,
          throttled_until = CASE WHEN ${throttleMs ?? null}::bigint IS NULL THEN s.throttled_until
            ELSE greatest(s.throttled_until, now() + ${throttleMs ?? null}::bigint * interval '1 millisecond') END
      FROM released r
      WHERE s.id = r.subscription_id AND s.id <> ${IMPLICIT_SUBSCRIPTION_ID}::uuid
        AND (${counts} OR ${throttleMs ?? null}::bigint IS NOT NULL)
      RETURNING s.breaker_state = 'open' AND s.breaker_opened_at = now() AND s.probe_token IS NULL AS opened,
                s.breaker_state = 'open' AS open, s.failure_streak, s.breaker_cooldown_ms
    )`
}

/** What `health` reported, read back by the failure statements. */
export interface HealthOutcome {
  /** This failure opened the subscription's breaker: with the streak that did it and the cool-down set. */
  readonly opened: { readonly failureStreak: number; readonly cooldownMs: number } | undefined
  /** The breaker is open now (opened by this failure or already, by any relay). */
  readonly open: boolean
}

/** The select-list part that reads `health` back: add it to the failure statement's final SELECT. */
export const HEALTH_COLUMNS = sql`(SELECT row_to_json(h) FROM health h) AS health`

/** Maps the `health` column read back into a {@link HealthOutcome}. */
export function healthOutcome(value: unknown): HealthOutcome {
  const row = value as
    | { opened?: boolean; open?: boolean; failure_streak?: number; breaker_cooldown_ms?: number }
    | null
    | undefined
  if (!row) return { opened: undefined, open: false }
  return {
    opened: row.opened
      ? { failureStreak: Number(row.failure_streak), cooldownMs: Number(row.breaker_cooldown_ms) }
      : undefined,
    open: row.open === true,
  }
}

/**
 * Records the outcome of a breaker's probe (the lane claimed with `probe`), fenced by the probe's claim token:
 * success closes the breaker and ends the streak; failure opens it again with the cool-down doubled, up to the
 * maximum. Returns what changed, or undefined when the probe was no longer the subscription's (its lease ended and
 * another probe took over, or the breaker was reset).
 */
export async function settleProbe(
  ctx: SqlContext,
  request: {
    readonly subscriptionId: string
    readonly claimToken: string
    readonly succeeded: boolean
    readonly breaker: Readonly<Required<EndpointBreakerOptions>>
  },
): Promise<
  { readonly state: 'closed' } | { readonly state: 'open'; readonly cooldownMs: number } | undefined
> {
  const { db, schema } = ctx
  const { subscriptionId, claimToken, succeeded, breaker } = request
  const { rows } = await sql<{ breaker_state: 'closed' | 'open'; breaker_cooldown_ms: string | null }>`
    UPDATE ${sql.id(schema, 'outbox_subscription')}
    SET breaker_state = CASE WHEN ${succeeded} THEN 'closed' ELSE 'open' END,
        failure_streak = CASE WHEN ${succeeded} THEN 0 ELSE failure_streak END,
        streak_started_at = CASE WHEN ${succeeded} THEN NULL ELSE streak_started_at END,
        breaker_opened_at = CASE WHEN ${succeeded} THEN NULL ELSE now() END,
        breaker_cooldown_ms = CASE WHEN ${succeeded} THEN NULL
          ELSE least(coalesce(breaker_cooldown_ms, ${breaker.cooldownMs}) * 2, ${breaker.maxCooldownMs}) END,
        probe_at = CASE WHEN ${succeeded} THEN NULL
          ELSE now() + least(coalesce(breaker_cooldown_ms, ${breaker.cooldownMs}) * 2, ${breaker.maxCooldownMs})
                       * interval '1 millisecond' END,
        probe_token = NULL
    WHERE id = ${subscriptionId}::uuid AND probe_token = ${claimToken}::uuid
    RETURNING breaker_state, breaker_cooldown_ms`.execute(db)
  const row = rows[0]
  if (!row) return undefined
  return row.breaker_state === 'closed'
    ? { state: 'closed' }
    : { state: 'open', cooldownMs: Number(row.breaker_cooldown_ms) }
}

/**
 * A statement fragment for the mark flush: a 2xx ends the failure streak of each subscription in `ids` that has one
 * (a no-op, and no row lock, for those without). Empty when there are none, so the implicit subscription's flushes
 * cost nothing more.
 */
export function streakResetCte(schema: string, ids: readonly string[]): RawBuilder<unknown> {
  if (ids.length === 0) return sql``
  return sql`, streak_reset AS (
      UPDATE ${sql.id(schema, 'outbox_subscription')} s
      SET failure_streak = 0, streak_started_at = NULL
      WHERE s.id = ANY(${ids}::uuid[]) AND s.failure_streak > 0 AND s.breaker_state = 'closed'
    )`
}
