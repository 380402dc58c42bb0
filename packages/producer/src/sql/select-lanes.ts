import { type RawBuilder, sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** Which lanes {@link selectLanes} lists. */
export type LaneStateFilter = 'blocked' | 'struggling' | 'leased'

/** One lane as {@link selectLanes} returns it, as PostgreSQL returns it (bigints as strings). */
export interface LaneRow {
  subscription_id: string
  subscription_name: string | null
  aggregate_type: string
  aggregate_id: string
  blocked_reason: 'exhausted' | 'conflict' | null
  blocked_at: Date | null
  leased_until: Date | null
  pending: string
  head_event_id: string | null
  head_sequence: string | null
  head_event_type: string | null
  head_attempts: number | null
  head_last_status: number | null
  head_last_error: string | null
  head_last_attempt_at: Date | null
  /** Null when the head is parked at `'infinity'` (behind a block). */
  head_available_at: Date | null
  blocker_event_id: string | null
  blocker_sequence: string | null
  blocker_last_status: number | null
  blocker_last_error: string | null
}

/**
 * Lists the lanes in one state, with each lane's head (its lowest pending sequence), its pending count and, for a
 * lane blocked as exhausted, its blocker (its dead row with the highest sequence, the one a redrive must revive to
 * resume it in order — as `redriveDead` and `deadLetterHead` define it). One statement, one snapshot.
 *
 * The states, each read from the index that already serves `stats`, so the list agrees with its counts:
 * - `blocked`: `blocked_reason IS NOT NULL` (an exhausted head under `'block'`, or a 409 park), oldest block first,
 *   from the partial blocked-lane index;
 * - `struggling`: a lane not blocked whose head has `strugglingAttempts` or more attempts — `stats` counts pending
 *   rows with that many attempts, and only a head ever accumulates attempts, so the lanes are found from those
 *   rows (the pending index) and their head re-read; most attempts first;
 * - `leased`: a live lease (`claim_token IS NOT NULL AND leased_until > now()`, the partial lease index), the lease
 *   that ends first first.
 *
 * Blocked and leased lanes are limited before the per-lane reads (index order is the list's order); struggling
 * lanes are ordered by their head's attempts, known only after the head is read, so their limit comes last.
 */
export async function selectLanes(
  ctx: SqlContext,
  request: {
    readonly state: LaneStateFilter
    readonly subscriptionId?: string | undefined
    readonly aggregateType?: string | undefined
    readonly aggregateId?: string | undefined
    readonly limit: number
    readonly strugglingAttempts: number
  },
): Promise<LaneRow[]> {
  const { db, schema } = ctx
  const { state, limit } = request
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const subscription = sql.id(schema, 'outbox_subscription')
  const filters: RawBuilder<unknown>[] = []
  if (request.subscriptionId !== undefined)
    filters.push(sql`l.subscription_id = ${request.subscriptionId}::uuid`)
  if (request.aggregateType !== undefined) filters.push(sql`l.aggregate_type = ${request.aggregateType}`)
  if (request.aggregateId !== undefined) filters.push(sql`l.aggregate_id = ${request.aggregateId}`)
  const filtered = filters.length === 0 ? sql`TRUE` : sql.join(filters, sql` AND `)
  const tie = sql`l.subscription_id, l.aggregate_type COLLATE "C", l.aggregate_id COLLATE "C"`
  // Raw SQL: LATERAL reads of each lane's head, pending count and blocker, which the builder does not shape readably.
  let picked: RawBuilder<unknown>
  let order: RawBuilder<unknown>
  let outerLimit: RawBuilder<unknown> = sql``
  if (state === 'blocked') {
    picked = sql`SELECT l.* FROM ${lane} l WHERE l.blocked_reason IS NOT NULL AND ${filtered}
      ORDER BY l.blocked_at, ${tie} LIMIT ${limit}`
    order = sql`l.blocked_at, ${tie}`
  } else if (state === 'leased') {
    picked = sql`SELECT l.* FROM ${lane} l WHERE l.claim_token IS NOT NULL AND l.leased_until > now() AND ${filtered}
      ORDER BY l.leased_until, ${tie} LIMIT ${limit}`
    order = sql`l.leased_until, ${tie}`
  } else {
    picked = sql`SELECT l.* FROM ${lane} l
      WHERE l.blocked_reason IS NULL AND ${filtered}
        AND EXISTS (SELECT 1 FROM ${outbox} s
                    WHERE s.subscription_id = l.subscription_id AND s.aggregate_type = l.aggregate_type
                      AND s.aggregate_id = l.aggregate_id AND s.status = 'pending'
                      AND s.attempts >= ${request.strugglingAttempts})`
    order = sql`h.attempts DESC, ${tie}`
    outerLimit = sql`LIMIT ${limit}`
  }
  const same = (alias: string) =>
    sql`${sql.id(alias)}.subscription_id = l.subscription_id AND ${sql.id(alias)}.aggregate_type = l.aggregate_type
      AND ${sql.id(alias)}.aggregate_id = l.aggregate_id`
  const { rows } = await sql<LaneRow>`
    SELECT l.subscription_id, sub.name AS subscription_name, l.aggregate_type, l.aggregate_id, l.blocked_reason,
           l.blocked_at,
           CASE WHEN l.claim_token IS NOT NULL AND l.leased_until > now() THEN l.leased_until END AS leased_until,
           p.pending,
           h.event_id AS head_event_id, h.sequence AS head_sequence, h.event_type AS head_event_type,
           h.attempts AS head_attempts, h.last_status AS head_last_status, h.last_error AS head_last_error,
           h.last_attempt_at AS head_last_attempt_at,
           CASE WHEN h.available_at = 'infinity' THEN NULL ELSE h.available_at END AS head_available_at,
           b.event_id AS blocker_event_id, b.sequence AS blocker_sequence, b.last_status AS blocker_last_status,
           b.last_error AS blocker_last_error
    FROM (${picked}) l
    LEFT JOIN ${subscription} sub ON sub.id = l.subscription_id
    LEFT JOIN LATERAL (
      SELECT o.event_id, o.sequence, o.event_type, o.attempts, o.last_status, o.last_error, o.last_attempt_at,
             o.available_at
      FROM ${outbox} o WHERE ${same('o')} AND o.status = 'pending' ORDER BY o.sequence LIMIT 1
    ) h ON TRUE
    CROSS JOIN LATERAL (
      SELECT count(*) AS pending FROM ${outbox} o WHERE ${same('o')} AND o.status = 'pending'
    ) p
    LEFT JOIN LATERAL (
      SELECT d.event_id, d.sequence, d.last_status, d.last_error
      FROM ${outbox} d WHERE ${same('d')} AND d.status = 'dead' ORDER BY d.sequence DESC LIMIT 1
    ) b ON l.blocked_reason = 'exhausted'
    WHERE ${state === 'struggling' ? sql`h.attempts >= ${request.strugglingAttempts}` : sql`TRUE`}
    ORDER BY ${order}
    ${outerLimit}`.execute(db)
  return rows
}
