/**
 * Migration 0009: endpoint health. Self-contained and frozen once merged: a later change is a new migration with its
 * own full text.
 *
 * - A circuit breaker per stored subscription, its state in `outbox_subscription` (shared by every relay, kept
 *   across restarts): `failure_streak` counts failed attempts in a row across the subscription's lanes (a 2xx
 *   resets it); at the relay's threshold the breaker opens (`breaker_state`, `breaker_opened_at`), no lane of it is
 *   claimed, and after `breaker_cooldown_ms` (`probe_at`) one claim across all relays takes ONE lane as the probe
 *   (`probe_token`). The probe's answer closes the breaker, or opens it again for a longer cool-down.
 * - `throttled_until`: a `Retry-After` on a 429 or 503 slows every lane of that subscription, not only the one
 *   that got it.
 * - `outbox_claim_subscription_lanes`: 0008's seven-argument `outbox_claim_lanes` honouring both, and returning
 *   `probe` per lane. A new name, not a replacement: its result has one more column, and no function's result may
 *   change in place (an earlier migration's `CREATE OR REPLACE`, run again, would fail on it). 0008's overload
 *   stays; no release ever called it (0008 and 0009 shipped together).
 */
export function migration0009(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox_subscription
  ADD COLUMN IF NOT EXISTS breaker_state text NOT NULL DEFAULT 'closed' CHECK (breaker_state IN ('closed', 'open')),
  ADD COLUMN IF NOT EXISTS failure_streak integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS streak_started_at timestamptz,
  ADD COLUMN IF NOT EXISTS breaker_opened_at timestamptz,
  ADD COLUMN IF NOT EXISTS breaker_cooldown_ms bigint,
  ADD COLUMN IF NOT EXISTS probe_at timestamptz,
  ADD COLUMN IF NOT EXISTS probe_token uuid,
  ADD COLUMN IF NOT EXISTS throttled_until timestamptz;

CREATE OR REPLACE FUNCTION ${s}.outbox_claim_subscription_lanes(
  p_subscriptions uuid[], p_room integer[], p_lanes integer, p_lease_ms bigint, p_scan_rows integer,
  p_batch integer, p_max_bytes bigint
) RETURNS TABLE (
  subscription_id uuid, aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean,
  charged boolean, watch_starts boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, payload_bytes bigint,
  created_at timestamptz, attempts integer, failing_ms bigint,
  window_full boolean, budget_full boolean, probe boolean
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_room integer[];
  v_subs uuid[];
  v_types text[];
  v_ids text[];
  v_tokens uuid[];
  v_taken boolean[];
  v_charged boolean[];
  v_watch boolean[];
  v_conflicts integer[];
  v_probes boolean[];
  v_probing uuid[];
  v_window_full boolean;
  v_budget_full boolean;
BEGIN
  -- See 0007: a claim need not wait for its WAL flush, and its statements keep one plan per connection.
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  -- Limited subscriptions' rows, locked in id order (no deadlock between relays), until this claim commits.
  -- Limited subscriptions' rows and those whose breaker is open (one probe across relays), locked in id order (no
  -- deadlock between relays), until this claim commits.
  PERFORM 1 FROM ${s}.outbox_subscription sub
  WHERE sub.id = ANY (p_subscriptions) AND (sub.max_in_flight IS NOT NULL OR sub.breaker_state = 'open')
  ORDER BY sub.id FOR NO KEY UPDATE;
  -- A statement of its own, so it reads with a fresh snapshot: the leases of claims committed while we waited.
  -- A stored subscription disabled since the relay last read its list gets no room.
  SELECT array_agg(greatest(0, CASE
           WHEN sub.state = 'disabled' AND sub.id <> '00000000-0000-0000-0000-000000000000' THEN 0
           -- A Retry-After from the endpoint slows all of its lanes, not only the one that got it.
           WHEN sub.throttled_until > now() THEN 0
           -- An open breaker: no lane, except one probe once its cool-down is over (probe_at then moves a lease
           -- ahead, so no other relay probes while it is in flight).
           WHEN sub.breaker_state = 'open' THEN CASE WHEN sub.probe_at <= now() THEN least(r.room, 1) ELSE 0 END
           WHEN sub.max_in_flight IS NULL THEN r.room ELSE least(r.room,
           sub.max_in_flight - (
             SELECT count(*) FROM ${s}.outbox_lane live
             WHERE live.subscription_id = r.id AND live.claim_token IS NOT NULL AND live.leased_until > now()
           )::integer) END) ORDER BY r.n),
         -- The open breakers whose probe is due: read under their row lock, so no other claim probes them too.
         array_agg(r.id) FILTER (WHERE sub.breaker_state = 'open' AND sub.probe_at <= now()
                                   AND (sub.throttled_until IS NULL OR sub.throttled_until <= now()))
  INTO v_room, v_probing
  FROM unnest(p_subscriptions, p_room) WITH ORDINALITY AS r(id, room, n)
  LEFT JOIN ${s}.outbox_subscription sub ON sub.id = r.id;
  IF v_room IS NULL THEN
    RETURN;
  END IF;
  WITH served AS (
    SELECT r.id, r.room FROM unnest(p_subscriptions, v_room) AS r(id, room) WHERE r.room > 0
  ), due AS (
    SELECT o.subscription_id, o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due,
           count(*) AS rows_scanned, min(o.scan_limit) AS scan_limit
    FROM served
    CROSS JOIN LATERAL (
      SELECT o.subscription_id, o.aggregate_type, o.aggregate_id, o.available_at,
             least(p_scan_rows, served.room * 8) AS scan_limit
      FROM ${s}.outbox o
      WHERE o.subscription_id = served.id AND o.status = 'pending' AND o.available_at <= now()
        AND (o.subscription_id, o.aggregate_type, o.aggregate_id) NOT IN (
          SELECT busy.subscription_id, busy.aggregate_type, busy.aggregate_id FROM ${s}.outbox_lane busy
          WHERE busy.claim_token IS NOT NULL AND busy.leased_until > now()
        )
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane parked
          WHERE parked.subscription_id = o.subscription_id AND parked.aggregate_type = o.aggregate_type
            AND parked.aggregate_id = o.aggregate_id AND parked.blocked_reason = 'exhausted'
        )
      ORDER BY o.available_at
      LIMIT least(p_scan_rows, served.room * 8)
    ) o
    GROUP BY o.subscription_id, o.aggregate_type, o.aggregate_id
  ), scanned AS (
    SELECT bool_or(t.rows >= t.scan_limit) AS full
    FROM (SELECT sum(due.rows_scanned) AS rows, min(due.scan_limit) AS scan_limit FROM due
          GROUP BY due.subscription_id) t
  ), picked AS (
    SELECT l.subscription_id, l.aggregate_type, l.aggregate_id, d.first_due, d.turn, l.claim_token AS old_token,
           (l.claim_token IS NOT NULL AND l.started_token IS NOT DISTINCT FROM l.claim_token) AS charged,
           l.watch_starts,
           (
             SELECT coalesce(head.payload_bytes, octet_length(head.payload::text)) FROM ${s}.outbox head
             WHERE head.subscription_id = l.subscription_id AND head.aggregate_type = l.aggregate_type
               AND head.aggregate_id = l.aggregate_id AND head.status = 'pending'
             ORDER BY head.sequence
             LIMIT 1
           ) AS head_bytes
    FROM (
      SELECT t.* FROM (
        SELECT due.subscription_id, due.aggregate_type, due.aggregate_id, due.first_due,
               row_number() OVER (PARTITION BY due.subscription_id ORDER BY due.first_due) AS turn
        FROM due
      ) t
      JOIN served ON served.id = t.subscription_id AND t.turn <= served.room
      ORDER BY t.turn, t.first_due
    ) d
    JOIN ${s}.outbox_lane l ON l.subscription_id = d.subscription_id AND l.aggregate_type = d.aggregate_type
      AND l.aggregate_id = d.aggregate_id
    WHERE (l.claim_token IS NULL OR l.leased_until <= now())
      AND l.blocked_reason IS DISTINCT FROM 'exhausted'
      AND (
        SELECT head.available_at FROM ${s}.outbox head
        WHERE head.subscription_id = l.subscription_id AND head.aggregate_type = l.aggregate_type
          AND head.aggregate_id = l.aggregate_id AND head.status = 'pending'
        ORDER BY head.sequence
        LIMIT 1
      ) <= now()
    LIMIT p_lanes
    FOR UPDATE OF l SKIP LOCKED
  ), fitting AS (
    SELECT p.*, sum(p.head_bytes) OVER w AS running, row_number() OVER w AS pos
    FROM picked p
    WINDOW w AS (ORDER BY p.turn, p.first_due, p.subscription_id, p.aggregate_type, p.aggregate_id
                 ROWS UNBOUNDED PRECEDING)
  ), claimed AS (
    UPDATE ${s}.outbox_lane l
    SET claim_token = gen_random_uuid(), leased_until = now() + p_lease_ms * interval '1 millisecond',
        watch_starts = f.watch_starts OR f.old_token IS NOT NULL, started_token = NULL,
        blocked_reason = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
        blocked_at = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END
    FROM fitting f
    WHERE l.subscription_id = f.subscription_id AND l.aggregate_type = f.aggregate_type
      AND l.aggregate_id = f.aggregate_id AND (f.running <= p_max_bytes OR f.pos = 1)
    RETURNING l.subscription_id, l.aggregate_type, l.aggregate_id, l.claim_token, f.old_token IS NOT NULL AS taken_over,
              f.charged, l.watch_starts, l.conflict_count, f.pos
  ), probes AS (
    -- The lane claimed for an open breaker is its probe: its token is recorded, and no other probe goes until the
    -- probe's outcome is recorded or its lease ends.
    UPDATE ${s}.outbox_subscription sub
    SET probe_token = c.claim_token, probe_at = now() + p_lease_ms * interval '1 millisecond'
    FROM claimed c
    WHERE sub.id = c.subscription_id AND sub.id = ANY (coalesce(v_probing, '{}'))
    RETURNING sub.id
  )
  SELECT array_agg(c.subscription_id ORDER BY c.pos), array_agg(c.aggregate_type ORDER BY c.pos),
         array_agg(c.aggregate_id ORDER BY c.pos), array_agg(c.claim_token ORDER BY c.pos),
         array_agg(c.taken_over ORDER BY c.pos), array_agg(c.charged ORDER BY c.pos),
         array_agg(c.watch_starts ORDER BY c.pos), array_agg(c.conflict_count ORDER BY c.pos),
         array_agg(c.subscription_id IN (SELECT p.id FROM probes p) ORDER BY c.pos),
         coalesce((SELECT scanned.full FROM scanned), false), (SELECT count(*) FROM fitting) > count(*)
  INTO v_subs, v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts, v_probes, v_window_full,
       v_budget_full
  FROM claimed c;
  IF v_tokens IS NULL THEN
    RETURN;
  END IF;
  -- As in 0007: a fresh snapshot, rows read heads first within the byte budget.
  RETURN QUERY
    SELECT c.subscription_id, c.aggregate_type, c.aggregate_id, c.claim_token, c.taken_over, c.charged,
           c.watch_starts, c.conflict_count,
           o.id, o.event_id, o.sequence, o.event_type, o.payload::text, k.bytes, o.created_at, o.attempts,
           (extract(epoch FROM now() - o.first_failed_at) * 1000)::bigint,
           v_window_full, v_budget_full, c.probe
    FROM unnest(v_subs, v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts, v_probes)
      WITH ORDINALITY
      AS c(subscription_id, aggregate_type, aggregate_id, claim_token, taken_over, charged, watch_starts,
           conflict_count, probe, n)
    LEFT JOIN (
      SELECT r.n, r.id, r.bytes
      FROM (
        SELECT e.n, e.id, e.bytes, sum(e.bytes) OVER w AS running, row_number() OVER w AS pos
        FROM (
          SELECT lane.n, candidate.id, candidate.bytes, candidate.rank
          FROM unnest(v_subs, v_types, v_ids) WITH ORDINALITY AS lane(subscription_id, aggregate_type, aggregate_id, n)
          CROSS JOIN LATERAL (
            SELECT o.id, coalesce(o.payload_bytes, octet_length(o.payload::text))::bigint AS bytes,
                   row_number() OVER (ORDER BY o.sequence) AS rank
            FROM ${s}.outbox o
            WHERE o.subscription_id = lane.subscription_id AND o.aggregate_type = lane.aggregate_type
              AND o.aggregate_id = lane.aggregate_id AND o.status = 'pending'
            ORDER BY o.sequence
            LIMIT p_batch
          ) candidate
        ) e
        WINDOW w AS (ORDER BY e.rank, e.n ROWS UNBOUNDED PRECEDING)
      ) r
      WHERE r.running <= p_max_bytes OR r.pos = 1
    ) k ON k.n = c.n
    LEFT JOIN ${s}.outbox o ON o.id = k.id
    ORDER BY c.n, o.sequence;
END
$fn$;
`
}
