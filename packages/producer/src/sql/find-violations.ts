import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/**
 * One row of {@link findViolations}: a broken liveness rule on one lane — a subscription's view of one aggregate —
 * or, when `subscription_id` is null, on the aggregate as a whole (its sequence counter, shared by every
 * subscription).
 */
export interface ViolationRow {
  kind: string
  subscription_id: string | null
  /** Null with no subscription, or when it is stored without a name or does not exist. */
  subscription_name: string | null
  aggregate_type: string
  aggregate_id: string
  detail: string
}

/** One row of {@link findOverdueHeads}. */
export interface OverdueHeadRow {
  subscription_id: string
  subscription_name: string | null
  aggregate_type: string
  aggregate_id: string
  event_id: string
  sequence: string
  overdue_seconds: number | string
}

/**
 * Finds lanes that break a liveness rule, at most `limit` per rule, in one statement (one snapshot). Each rule is a
 * way an aggregate could stop moving silently; the relay, enqueue, redrive and prune keep all of them, so any row
 * here is a defect or damage from outside (a manual edit, a restore, an older release).
 *
 * A lane is (subscription, aggregate), and every rule but the counter's is checked per lane: each join and each
 * subquery matches `subscription_id` as well as the aggregate, so one subscription's rows never excuse (or
 * condemn) another subscription's lane of the same aggregate.
 *
 * 1. `pending_without_lane`: pending events with no lane row — no claim can ever take them.
 * 2. `head_not_due`: the head (lowest pending sequence) waits at `'infinity'`, and the lane is not blocked by a dead
 *    letter below it that a redrive could revive.
 * 3. `row_at_infinity`: a pending row at `'infinity'` in a lane not blocked as exhausted — it becomes a head that is
 *    never due.
 * 4. `blocked_without_dead_letter`: blocked as exhausted, with no dead row left to redrive (it was pruned);
 *    `conflict_without_pending`: parked by a 409 with nothing pending; `stale_conflict_marker`: parked by a 409
 *    while its head's last answer was something else.
 * 5. `lease_too_long`: a lease that ends later than `maxLeaseMs` from now, longer than any relay takes.
 * 6. `counter_behind`: an aggregate's counter is missing or below one of its sequences (in any subscription's lane)
 *    — the next enqueue would reuse a sequence and fail on the unique key. Reported once per aggregate, with no
 *    subscription: the counter is the aggregate's.
 * 7. `orphaned_subscription`: pending events of a subscription id with no `outbox_subscription` row (there is no
 *    foreign key: deleting a subscription deletes its rows itself, so this is damage) — no relay serves them.
 *
 * Costs: the pending-row rules read the pending index (which leads with the subscription); rules 4–6 read the lane
 * table's partial indexes, and rule 6 probes the sequence index once per lane (every subscription's view of every
 * aggregate ever seen): a diagnostic, not something to run per second.
 */
export async function findViolations(
  ctx: SqlContext,
  options: { readonly maxLeaseMs: number; readonly limit: number },
): Promise<ViolationRow[]> {
  const { db, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const counter = sql.id(schema, 'outbox_counter')
  const subscription = sql.id(schema, 'outbox_subscription')
  const { limit, maxLeaseMs } = options
  // Raw SQL: one snapshot across nine rules, each a UNION ALL branch with its own LIMIT, named once at the end.
  const { rows } = await sql<ViolationRow>`
    WITH heads AS (
      SELECT DISTINCT ON (o.subscription_id, o.aggregate_type, o.aggregate_id)
             o.subscription_id, o.aggregate_type, o.aggregate_id, o.sequence, o.available_at, o.last_status
      FROM ${outbox} o WHERE o.status = 'pending'
      ORDER BY o.subscription_id, o.aggregate_type, o.aggregate_id, o.sequence
    ), found AS (
    (SELECT 'pending_without_lane' AS kind, o.subscription_id, o.aggregate_type, o.aggregate_id,
            count(*) || ' pending event(s) and no lane row: no claim can take them' AS detail
     FROM ${outbox} o
     WHERE o.status = 'pending' AND NOT EXISTS (
       SELECT 1 FROM ${lane} l
       WHERE l.subscription_id = o.subscription_id AND l.aggregate_type = o.aggregate_type
         AND l.aggregate_id = o.aggregate_id)
     GROUP BY o.subscription_id, o.aggregate_type, o.aggregate_id
     LIMIT ${limit})
    UNION ALL
    (SELECT 'head_not_due', h.subscription_id, h.aggregate_type, h.aggregate_id,
            'head (sequence ' || h.sequence || ') waits at infinity and no dead letter below it blocks the lane'
     FROM heads h
     LEFT JOIN ${lane} l ON l.subscription_id = h.subscription_id AND l.aggregate_type = h.aggregate_type
       AND l.aggregate_id = h.aggregate_id
     WHERE h.available_at = 'infinity' AND NOT (
       l.blocked_reason IS NOT DISTINCT FROM 'exhausted' AND EXISTS (
         SELECT 1 FROM ${outbox} d
         WHERE d.subscription_id = h.subscription_id AND d.aggregate_type = h.aggregate_type
           AND d.aggregate_id = h.aggregate_id AND d.status = 'dead' AND d.sequence < h.sequence))
     LIMIT ${limit})
    UNION ALL
    (SELECT 'row_at_infinity', o.subscription_id, o.aggregate_type, o.aggregate_id,
            count(*) || ' pending event(s) at infinity in a lane that is not blocked'
     FROM ${outbox} o
     LEFT JOIN ${lane} l ON l.subscription_id = o.subscription_id AND l.aggregate_type = o.aggregate_type
       AND l.aggregate_id = o.aggregate_id
     WHERE o.status = 'pending' AND o.available_at = 'infinity' AND l.blocked_reason IS DISTINCT FROM 'exhausted'
     GROUP BY o.subscription_id, o.aggregate_type, o.aggregate_id
     LIMIT ${limit})
    UNION ALL
    (SELECT 'blocked_without_dead_letter', l.subscription_id, l.aggregate_type, l.aggregate_id,
            'blocked as exhausted since ' || l.blocked_at || ', but no dead letter is left to redrive'
     FROM ${lane} l
     WHERE l.blocked_reason = 'exhausted' AND NOT EXISTS (
       SELECT 1 FROM ${outbox} d
       WHERE d.subscription_id = l.subscription_id AND d.aggregate_type = l.aggregate_type
         AND d.aggregate_id = l.aggregate_id AND d.status = 'dead')
     LIMIT ${limit})
    UNION ALL
    (SELECT 'conflict_without_pending', l.subscription_id, l.aggregate_type, l.aggregate_id,
            'parked by a 409 since ' || l.blocked_at || ' with nothing pending'
     FROM ${lane} l
     WHERE l.blocked_reason = 'conflict' AND NOT EXISTS (
       SELECT 1 FROM ${outbox} o
       WHERE o.subscription_id = l.subscription_id AND o.aggregate_type = l.aggregate_type
         AND o.aggregate_id = l.aggregate_id AND o.status = 'pending')
     LIMIT ${limit})
    UNION ALL
    (SELECT 'stale_conflict_marker', l.subscription_id, l.aggregate_type, l.aggregate_id,
            'parked by a 409, but its head (sequence ' || h.sequence || ') was last answered '
              || coalesce(h.last_status::text, 'nothing')
     FROM ${lane} l
     JOIN heads h ON h.subscription_id = l.subscription_id AND h.aggregate_type = l.aggregate_type
       AND h.aggregate_id = l.aggregate_id
     WHERE l.blocked_reason = 'conflict' AND h.last_status IS DISTINCT FROM 409
     LIMIT ${limit})
    UNION ALL
    (SELECT 'lease_too_long', l.subscription_id, l.aggregate_type, l.aggregate_id,
            'leased until ' || l.leased_until || ', more than ' || ${maxLeaseMs}::bigint || ' ms from now'
     FROM ${lane} l
     WHERE l.claim_token IS NOT NULL AND l.leased_until > now() + ${maxLeaseMs} * interval '1 millisecond'
     LIMIT ${limit})
    UNION ALL
    (SELECT DISTINCT ON (l.aggregate_type, l.aggregate_id)
            'counter_behind', NULL::uuid, l.aggregate_type, l.aggregate_id,
            CASE WHEN c.last_sequence IS NULL THEN 'no sequence counter'
                 ELSE 'counter at ' || c.last_sequence || ' below an existing sequence' END
     FROM ${lane} l
     LEFT JOIN ${counter} c ON c.aggregate_type = l.aggregate_type AND c.aggregate_id = l.aggregate_id
     WHERE c.last_sequence IS NULL OR EXISTS (
       SELECT 1 FROM ${outbox} o
       WHERE o.subscription_id = l.subscription_id AND o.aggregate_type = l.aggregate_type
         AND o.aggregate_id = l.aggregate_id AND o.sequence > c.last_sequence)
     ORDER BY l.aggregate_type, l.aggregate_id
     LIMIT ${limit})
    UNION ALL
    (SELECT 'orphaned_subscription', o.subscription_id, o.aggregate_type, o.aggregate_id,
            count(*) || ' pending event(s) of subscription ' || o.subscription_id
              || ', which does not exist: no relay serves them'
     FROM ${outbox} o
     WHERE o.status = 'pending'
       AND NOT EXISTS (SELECT 1 FROM ${subscription} s WHERE s.id = o.subscription_id)
     GROUP BY o.subscription_id, o.aggregate_type, o.aggregate_id
     LIMIT ${limit})
    )
    SELECT f.kind, f.subscription_id, s.name AS subscription_name, f.aggregate_type, f.aggregate_id, f.detail
    FROM found f LEFT JOIN ${subscription} s ON s.id = f.subscription_id`.execute(db)
  return rows
}

/**
 * Heads due for longer than `overdueMs` whose lane no live lease holds and no dead letter blocks: a finding, not a
 * violation — it is what an outbox looks like with no relay running (or relays far behind). Heads of a disabled
 * stored subscription, or of one whose backfill runs (migration 0014), are left out (no relay claims them by design;
 * `checkIntegrity` warns about them apart), and so
 * are those of a subscription that no longer exists (a violation of their own).
 */
export async function findOverdueHeads(
  ctx: SqlContext,
  options: { readonly overdueMs: number; readonly limit: number },
): Promise<OverdueHeadRow[]> {
  const { db, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const subscription = sql.id(schema, 'outbox_subscription')
  // Raw SQL: a DISTINCT ON subquery (each lane's head), which the builder has no readable form for.
  const { rows } = await sql<OverdueHeadRow>`
    SELECT h.subscription_id, s.name AS subscription_name, h.aggregate_type, h.aggregate_id, h.event_id, h.sequence,
           extract(epoch FROM now() - h.available_at) AS overdue_seconds
    FROM (
      SELECT DISTINCT ON (o.subscription_id, o.aggregate_type, o.aggregate_id)
             o.subscription_id, o.aggregate_type, o.aggregate_id, o.event_id, o.sequence, o.available_at
      FROM ${outbox} o WHERE o.status = 'pending'
      ORDER BY o.subscription_id, o.aggregate_type, o.aggregate_id, o.sequence
    ) h
    JOIN ${lane} l ON l.subscription_id = h.subscription_id AND l.aggregate_type = h.aggregate_type
      AND l.aggregate_id = h.aggregate_id
    JOIN ${subscription} s ON s.id = h.subscription_id
    WHERE h.available_at < now() - ${options.overdueMs} * interval '1 millisecond'
      AND (l.claim_token IS NULL OR l.leased_until <= now())
      AND l.blocked_reason IS DISTINCT FROM 'exhausted'
      AND (s.state = 'enabled' OR s.id = ${IMPLICIT_SUBSCRIPTION_ID}::uuid)
      AND s.backfill_state IS DISTINCT FROM 'running'
    ORDER BY h.available_at
    LIMIT ${options.limit}`.execute(db)
  return rows
}
