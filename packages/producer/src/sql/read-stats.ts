import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/**
 * Raw figures of one subscription behind `stats`, as PostgreSQL returns them. A row whose `known` is false groups
 * outbox rows or lanes of a subscription id with no `outbox_subscription` row (deleted while rows were left).
 */
export interface SubscriptionStatsRow {
  subscription_id: string
  known: boolean
  name: string | null
  state: string | null
  tenant: string | null
  /** 'closed', 'open' or 'probing'; null for an unknown subscription. */
  breaker: 'closed' | 'open' | 'probing' | null
  lag_seconds: number | string | null
  /** Enqueue time of its oldest pending delivery. */
  oldest_pending_at: Date | null
  /** Seconds since the enqueue of its oldest pending delivery that is due now (not waiting in a backoff or a park). */
  oldest_due_seconds: number | string | null
  disabled_at: Date | null
  /** Why it is disabled (`gone`: the relay disabled it on a 410; else the operator's reason). */
  disabled_reason: string | null
  /** Deliveries the disabled retention dropped from it (migration 0013); '0' for an unknown subscription. */
  dropped_deliveries: string
  last_dropped_at: Date | null
  pending: string
  struggling: string
  suspect: string
  dead: string
  in_flight: string
  blocked: string
}

/**
 * Reads every stats figure, per subscription, in one round trip and one statement (one snapshot), so the numbers
 * agree with each other and the totals are the sums of the rows.
 *
 * One row per subscription id met in the outbox, the lanes or `outbox_subscription`. Each figure is one grouped
 * scan: pending rows read once through the partial pending index (lag, oldest due, pending and struggling together,
 * small however many sent rows exist; the oldest due row is an aggregate FILTER of that same scan, not a second one:
 * a row waiting in a retry backoff or behind a park has its `available_at` in the future, so `available_at <= now()`
 * is exactly "a relay could send it now"); `dead` from the partial dead index; lane figures from the lane table's partial
 * indexes (leased, blocked). `struggling` counts rows with three or more attempts: only a lane's head ever
 * accumulates attempts, so that is the number of struggling heads; `suspect` (migration 0019) is a head's flag too.
 */
export async function readStats(
  ctx: SqlContext,
  request: { readonly strugglingAttempts: number },
): Promise<SubscriptionStatsRow[]> {
  const { db, schema } = ctx
  const { strugglingAttempts } = request
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const subscription = sql.id(schema, 'outbox_subscription')
  // Raw SQL: four grouped scans and a full list of ids joined in one statement (one snapshot), with FILTER
  // aggregates the builder does not shape readably.
  const { rows } = await sql<SubscriptionStatsRow>`
    WITH pending AS (
      SELECT o.subscription_id, min(o.created_at) AS oldest,
             min(o.created_at) FILTER (WHERE o.available_at <= now()) AS oldest_due, count(*) AS pending,
             count(*) FILTER (WHERE o.attempts >= ${strugglingAttempts}) AS struggling,
             count(*) FILTER (WHERE o.suspect) AS suspect
      FROM ${outbox} o WHERE o.status = 'pending'
      GROUP BY o.subscription_id
    ), dead AS (
      SELECT o.subscription_id, count(*) AS dead FROM ${outbox} o WHERE o.status = 'dead'
      GROUP BY o.subscription_id
    ), in_flight AS (
      SELECT l.subscription_id, count(*) AS in_flight FROM ${lane} l
      WHERE l.claim_token IS NOT NULL AND l.leased_until > now()
      GROUP BY l.subscription_id
    ), blocked AS (
      SELECT l.subscription_id, count(*) AS blocked FROM ${lane} l WHERE l.blocked_reason IS NOT NULL
      GROUP BY l.subscription_id
    ), ids AS (
      SELECT subscription_id FROM pending UNION SELECT subscription_id FROM dead
      UNION SELECT subscription_id FROM in_flight UNION SELECT subscription_id FROM blocked
      UNION SELECT id FROM ${subscription}
    )
    SELECT ids.subscription_id, s.id IS NOT NULL AS known, s.name, s.state, s.tenant,
           CASE WHEN s.breaker_state = 'open' AND s.probe_token IS NOT NULL AND s.probe_at > now() THEN 'probing'
                ELSE s.breaker_state END AS breaker,
           extract(epoch FROM now() - p.oldest) AS lag_seconds, p.oldest AS oldest_pending_at,
           extract(epoch FROM now() - p.oldest_due) AS oldest_due_seconds, s.disabled_at, s.disabled_reason,
           coalesce(s.dropped_deliveries, 0) AS dropped_deliveries, s.last_dropped_at,
           coalesce(p.pending, 0) AS pending, coalesce(p.struggling, 0) AS struggling,
           coalesce(p.suspect, 0) AS suspect,
           coalesce(d.dead, 0) AS dead, coalesce(f.in_flight, 0) AS in_flight, coalesce(b.blocked, 0) AS blocked
    FROM ids
    LEFT JOIN ${subscription} s ON s.id = ids.subscription_id
    LEFT JOIN pending p ON p.subscription_id = ids.subscription_id
    LEFT JOIN dead d ON d.subscription_id = ids.subscription_id
    LEFT JOIN in_flight f ON f.subscription_id = ids.subscription_id
    LEFT JOIN blocked b ON b.subscription_id = ids.subscription_id
    ORDER BY ids.subscription_id <> ${IMPLICIT_SUBSCRIPTION_ID}::uuid, s.name COLLATE "C", ids.subscription_id`.execute(
    db,
  )
  return rows
}
