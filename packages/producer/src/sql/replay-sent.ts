import { sql } from 'kysely'
import type { AggregateKey } from './select-replay-lanes.js'
import type { TransactionContext } from './sql-context.js'

/** What one {@link replaySent} batch did. */
export interface ReplaySentResult {
  /** Lanes whose sent rows went back to pending (at least one row each). */
  readonly lanes: number
  /** Rows put back to pending. */
  readonly events: number
  /** Lanes left untouched because a relay holds them: the caller tries them again later. */
  readonly busy: AggregateKey[]
}

/**
 * Puts one subscription's SENT rows of the given aggregates, created in [`since`, `until`), back to pending, so the
 * relay sends them again with their own event ids and sequences. Call it in a transaction of its own.
 *
 * A lane delivers its pending rows in sequence order, so the replayed rows (older sequences) go before any newer
 * pending row — as long as all of a lane's replayed rows become pending in ONE transaction and no relay is in the
 * middle of delivering that lane. Hence the locks, in this order and each set in byte order of the key (`COLLATE
 * "C"`), the order `redriveDead` and `enqueueMany` take them in, so the three never deadlock with each other:
 * - the aggregates' COUNTER rows, which every enqueue of the aggregate holds until it commits: no enqueue of them
 *   is open while the lane is rewritten, and the statement below sees every row they committed.
 * - the LANE rows, with SKIP LOCKED: a lane locked right now is being claimed or marked by a relay, so it is busy
 *   anyway; not waiting for it means a replay never waits on a relay's statement nor deadlocks with a mark that
 *   releases several lanes in its own order.
 *
 * A lane is busy, and left for a later try, while a live lease holds it (a relay may be delivering newer rows:
 * re-pending older ones now would send them after those), and also while an expired claim that recorded the start
 * of a request waits for its takeover: the takeover charges that request's failure to the lane's head, which must
 * not become a replayed row that never failed.
 *
 * The replayed rows' due time keeps every liveness rule (`checkIntegrity`):
 * - a lane blocked by `onExhausted: 'block'`: rows above its blocker (its highest dead sequence) wait at
 *   `'infinity'`, as enqueue writes them behind a block, until the redrive of the blocker releases them; rows below
 *   it come before the block in sequence order and are due now, as a redrive revives an older dead letter: the claim
 *   skips the blocked lane, and they go first once the block is lifted.
 * - a lane parked by a 409 whose head the replay changes (a replayed row goes below it): the park ends, as a redrive
 *   ends it, and the rows are due now — the park waited for an answer about the old head.
 * - any other lane: due when its current head is (now if it has none), so a head waiting in backoff, or for a
 *   `Retry-After`, or for an unchanged 409 park, is not tried early by a replayed row in front of it.
 *
 * Attempts, first failure, the sent time and the last answer restart, as for a new event: the row's history is
 * its new delivery's. Dead rows are not touched (a redrive revives them); pruned rows are gone.
 */
export async function replaySent(
  ctx: TransactionContext,
  request: {
    readonly subscriptionId: string
    readonly lanes: readonly AggregateKey[]
    readonly since: Date
    readonly until: Date
    /** The NOTIFY channel of the schema, told when rows became pending so relays listening claim them at once. */
    readonly channel: string
  },
): Promise<ReplaySentResult> {
  const { db: trx, schema } = ctx
  const { subscriptionId: subscription, since, until } = request
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const counter = sql.id(schema, 'outbox_counter')
  const keysOf = (keys: readonly AggregateKey[]) =>
    sql`SELECT * FROM unnest(${keys.map((key) => key.aggregate_type)}::text[], ${keys.map((key) => key.aggregate_id)}::text[])
      AS k(aggregate_type, aggregate_id)`
  const chosen = keysOf(request.lanes)
  // Raw SQL from here: row locks taken in byte order (COLLATE "C"), SKIP LOCKED, and data-modifying CTEs.
  await sql`
    SELECT 1 FROM ${counter} c WHERE (c.aggregate_type, c.aggregate_id) IN (${chosen})
    ORDER BY c.aggregate_type COLLATE "C", c.aggregate_id COLLATE "C"
    FOR UPDATE`.execute(trx)
  const { rows: locked } = await sql<AggregateKey & { busy: boolean }>`
    SELECT l.aggregate_type, l.aggregate_id,
           (l.claim_token IS NOT NULL
            AND (l.leased_until > now() OR l.started_token IS NOT DISTINCT FROM l.claim_token)) AS busy
    FROM ${lane} l
    WHERE l.subscription_id = ${subscription}::uuid AND (l.aggregate_type, l.aggregate_id) IN (${chosen})
    ORDER BY l.aggregate_type COLLATE "C", l.aggregate_id COLLATE "C"
    FOR UPDATE SKIP LOCKED`.execute(trx)
  const key = (k: AggregateKey) => JSON.stringify([k.aggregate_type, k.aggregate_id])
  const seen = new Set(locked.map(key))
  const busy: AggregateKey[] = locked
    .filter((row) => row.busy)
    .map((row) => ({ aggregate_type: row.aggregate_type, aggregate_id: row.aggregate_id }))
  const skipped = request.lanes.filter((k) => !seen.has(key(k)))
  if (skipped.length > 0) {
    // Not returned: locked by a relay's statement right now (busy), or — never made by this package — no lane row.
    const { rows: existing } = await sql<AggregateKey>`
      SELECT l.aggregate_type, l.aggregate_id FROM ${lane} l
      WHERE l.subscription_id = ${subscription}::uuid AND (l.aggregate_type, l.aggregate_id) IN (${keysOf(skipped)})`.execute(
      trx,
    )
    busy.push(...existing)
  }
  const free = locked.filter((row) => !row.busy)
  if (free.length === 0) return { lanes: 0, events: 0, busy }
  // A fresh snapshot, now that no enqueue of these aggregates is open and no relay holds their lanes.
  const { rows } = await sql<{ lanes: string; events: string }>`
    WITH state AS (
      SELECT f.aggregate_type, f.aggregate_id, l.blocked_reason, h.sequence AS head_sequence, h.available_at AS head_at,
             (SELECT max(d.sequence) FROM ${outbox} d
              WHERE d.subscription_id = l.subscription_id AND d.aggregate_type = l.aggregate_type
                AND d.aggregate_id = l.aggregate_id AND d.status = 'dead') AS blocker
      FROM (${keysOf(free)}) f
      JOIN ${lane} l ON l.subscription_id = ${subscription}::uuid AND l.aggregate_type = f.aggregate_type
        AND l.aggregate_id = f.aggregate_id
      LEFT JOIN LATERAL (
        SELECT p.sequence, p.available_at FROM ${outbox} p
        WHERE p.subscription_id = l.subscription_id AND p.aggregate_type = l.aggregate_type
          AND p.aggregate_id = l.aggregate_id AND p.status = 'pending'
        ORDER BY p.sequence
        LIMIT 1
      ) h ON true
    ), target AS (
      SELECT o.id, o.sequence, s.aggregate_type, s.aggregate_id, s.blocked_reason, s.head_at, s.blocker,
             (s.head_sequence IS NULL
              OR min(o.sequence) OVER (PARTITION BY s.aggregate_type, s.aggregate_id) < s.head_sequence) AS new_head
      FROM state s
      JOIN ${outbox} o ON o.subscription_id = ${subscription}::uuid AND o.aggregate_type = s.aggregate_type
        AND o.aggregate_id = s.aggregate_id
      WHERE o.status = 'sent' AND o.created_at >= ${since} AND o.created_at < ${until}
    ), replayed AS (
      UPDATE ${outbox} o
      SET status = 'pending', attempts = 0, takeover_charges = 0, suspect = false, first_failed_at = NULL, sent_at = NULL, last_attempt_at = NULL,
          last_status = NULL, last_error = NULL, delivery_status = NULL,
          available_at = CASE
            WHEN t.blocked_reason = 'exhausted' AND t.sequence > t.blocker THEN 'infinity'::timestamptz
            WHEN t.blocked_reason = 'exhausted' THEN now()
            WHEN t.blocked_reason = 'conflict' AND t.new_head THEN now()
            ELSE greatest(now(), coalesce(t.head_at, now()))
          END
      FROM target t
      WHERE o.id = t.id AND o.status = 'sent'
      RETURNING o.aggregate_type, o.aggregate_id
    ), unparked AS (
      UPDATE ${lane} l
      SET blocked_reason = NULL, blocked_at = NULL, conflict_count = 0
      FROM (SELECT DISTINCT t.aggregate_type, t.aggregate_id FROM target t
            WHERE t.blocked_reason = 'conflict' AND t.new_head) t
      WHERE l.subscription_id = ${subscription}::uuid AND l.aggregate_type = t.aggregate_type
        AND l.aggregate_id = t.aggregate_id AND l.blocked_reason = 'conflict'
    )
    SELECT count(DISTINCT (r.aggregate_type, r.aggregate_id)) AS lanes, count(*) AS events
    FROM replayed r`.execute(trx)
  const events = Number(rows[0]?.events ?? 0)
  // The same notification enqueue sends, on the schema's channel: a listening relay claims the rows at once.
  if (events > 0) await sql`SELECT pg_notify(${request.channel}, '')`.execute(trx)
  return { lanes: Number(rows[0]?.lanes ?? 0), events, busy }
}
