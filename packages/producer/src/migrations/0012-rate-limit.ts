/**
 * Migration 0012: a request rate per subscription. Self-contained and frozen once merged: a later change is a new
 * migration with its own full text.
 *
 * - `outbox_subscription.rate_per_second`: the most requests per second every relay together sends to the
 *   subscription's endpoint (`ratePerSecond`); null for no rate.
 * - A token bucket on the same row, shared by every relay and kept across restarts: `rate_tokens` (null for a full
 *   bucket) as of `rate_refilled_at`. It holds at most one second's worth of requests (at least one) and refills
 *   with elapsed database time; tokens are spent only under the row's lock, which the claim already takes for
 *   `max_in_flight` and open breakers, so relays never spend the same token twice.
 * - `outbox_claim_subscription_lanes` with the same arguments and result as 0009's (so `CREATE OR REPLACE`
 *   replaces it in place), and every behaviour of 0009's kept (breaker probe, throttle, maxInFlight, turns, byte
 *   budget, scan window). A rate-limited subscription's room is also bounded by its whole tokens; each lane claimed
 *   for it is read with ONE event (one request per lane), and exactly the lanes claimed are spent, in one write per
 *   claim. One with no whole token gets room 0 and is not scanned, as at maxInFlight, so its backlog costs a claim
 *   nothing; its scan window filling up is not reported, so a relay does not claim again at once for tokens it
 *   does not have.
 */
export function migration0012(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox_subscription
  ADD COLUMN IF NOT EXISTS rate_per_second double precision CHECK (rate_per_second > 0),
  ADD COLUMN IF NOT EXISTS rate_tokens double precision,
  ADD COLUMN IF NOT EXISTS rate_refilled_at timestamptz;

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
  v_now timestamptz;
  v_rate_locked uuid[];
  v_rated uuid[];
  v_rate_tokens double precision[];
  v_rate_bound uuid[];
BEGIN
  -- See 0007: a claim need not wait for its WAL flush, and its statements keep one plan per connection.
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  -- Limited subscriptions' rows (maxInFlight, a rate) and those whose breaker is open (one probe across relays),
  -- locked in id order (no deadlock between relays), until this claim commits. The rate-limited ones are noted: a
  -- token bucket is read and spent only under its row's lock, so two relays never spend the same tokens.
  SELECT array_agg(locked.id) FILTER (WHERE locked.rate_per_second IS NOT NULL)
  INTO v_rate_locked
  FROM (
    SELECT sub.id, sub.rate_per_second FROM ${s}.outbox_subscription sub
    WHERE sub.id = ANY (p_subscriptions)
      AND (sub.max_in_flight IS NOT NULL OR sub.breaker_state = 'open' OR sub.rate_per_second IS NOT NULL)
    ORDER BY sub.id FOR NO KEY UPDATE
  ) locked;
  -- The buckets' clock, read once the locks are held: the real time closest to the requests the tokens allow (now()
  -- is the transaction's start, which may lie a lock wait before).
  v_now := clock_timestamp();
  -- A statement of its own, so it reads with a fresh snapshot: the leases of claims committed while we waited.
  -- A stored subscription disabled since the relay last read its list gets no room. A rate-limited one gets at
  -- most its whole tokens: its bucket holds at most one second's worth (at least 1) and refills with the time
  -- elapsed since its last spend. One whose rate was set after the lock above was taken gets none this time.
  SELECT array_agg(greatest(0, least(q.room, floor(q.tokens)::integer)) ORDER BY q.n),
         array_agg(q.id) FILTER (WHERE q.probing),
         array_agg(q.id ORDER BY q.n) FILTER (WHERE q.tokens IS NOT NULL),
         array_agg(q.tokens ORDER BY q.n) FILTER (WHERE q.tokens IS NOT NULL),
         -- Whose room the rate bounded: their scan filling up is no reason to claim again at once (see scanned).
         array_agg(q.id) FILTER (WHERE floor(q.tokens) <= q.room)
  INTO v_room, v_probing, v_rated, v_rate_tokens, v_rate_bound
  FROM (
    SELECT r.id, r.n,
           CASE
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
           )::integer) END AS room,
           -- The open breakers whose probe is due: read under their row lock, so no other claim probes them too.
           coalesce(sub.breaker_state = 'open' AND sub.probe_at <= now()
                    AND (sub.throttled_until IS NULL OR sub.throttled_until <= now()), false) AS probing,
           CASE
           WHEN sub.rate_per_second IS NULL THEN NULL
           WHEN NOT sub.id = ANY (coalesce(v_rate_locked, '{}')) THEN 0
           ELSE least(greatest(1, sub.rate_per_second), coalesce(
             sub.rate_tokens
               + sub.rate_per_second * greatest(0, extract(epoch FROM v_now - sub.rate_refilled_at)::double precision),
             greatest(1, sub.rate_per_second)))
           END AS tokens
    FROM unnest(p_subscriptions, p_room) WITH ORDINALITY AS r(id, room, n)
    LEFT JOIN ${s}.outbox_subscription sub ON sub.id = r.id
  ) q;
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
          WHERE due.subscription_id <> ALL (coalesce(v_rate_bound, '{}'))
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
  -- Spend one token per lane claimed (not per lane offered), under the row lock still held: each such lane is read
  -- with one event below, so it makes one request. A statement of its own: the probes above may have updated the
  -- same rows, and one statement must not update a row twice. Buckets with nothing spent are not written: their
  -- tokens follow from the last spend and the time since.
  IF v_rated IS NOT NULL THEN
    UPDATE ${s}.outbox_subscription sub
    SET rate_tokens = r.tokens - c.spent, rate_refilled_at = greatest(sub.rate_refilled_at, v_now)
    FROM unnest(v_rated, v_rate_tokens) AS r(id, tokens)
    JOIN (SELECT l.id, count(*) AS spent FROM unnest(v_subs) AS l(id) GROUP BY l.id) c ON c.id = r.id
    WHERE sub.id = r.id;
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
            -- A rate-limited subscription's lane is read with one event: one request per token spent.
            LIMIT CASE WHEN lane.subscription_id = ANY (coalesce(v_rated, '{}')) THEN 1 ELSE p_batch END
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
