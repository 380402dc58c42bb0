/**
 * Migration 0017: a leaner claim for one subscription. Self-contained and frozen once merged: a later change is a
 * new migration with its own full text.
 *
 * `outbox_claim_single_subscription_lanes` claims for ONE subscription what `outbox_claim_subscription_lanes` (0012)
 * would claim for it, with the same result rows, through a smaller plan: no turns between subscriptions, no probe,
 * no token bucket. A relay given an `endpoint` claims this way on every pass, and so does any relay whose claim
 * offers room to one subscription. Why it exists: PostgreSQL starts every node of a statement's plan on each call
 * (the cached generic plan saves only the planning), and 0012's claim statement, built for many subscriptions, cost
 * a single-endpoint relay about 0.3 ms more per claim than 0007's did (0.75–0.95 against 0.55–0.7 ms for one lane,
 * 0.3–0.5 against 0.2 ms for none, PostgreSQL 15, one connection). On two cores that CPU is on every event's path.
 *
 * - A subscription with a `maxInFlight`, a rate or an open breaker is handed to 0012's claim whole (its row locks,
 *   counts, tokens and probe are that function's): the lean path reads the subscription row once, unlocked, as
 *   0012's room statement does, so a limit set or a breaker opened by a transaction that commits after that read is
 *   met by the next claim, as it would be by 0012's.
 * - A disabled stored subscription (not the implicit one) or a throttled one (`Retry-After`) gets no lane, as in
 *   0012; so does a room of 0.
 * - Nothing due (the subscription's earliest pending `available_at` is later than now, or it has none): it
 *   returns before the claim statement starts, one probe of the due index.
 * - Otherwise the claim statement is 0012's for one subscription: the due scan over the subscription's due index,
 *   skipping leased lanes (a hashed set of this subscription's leased lanes) and lanes blocked by `onExhausted:
 *   'block'`; the head computed before any due filter (the ordering rule); `FOR UPDATE SKIP LOCKED` on the lane
 *   row; the byte budget; the takeover charge and watch; a `conflict` park cleared. Then the rows are read by a
 *   second statement, with a fresh snapshot, heads first within the byte budget, as in 0007 and 0012.
 */
export function migration0017(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_single_subscription_lanes(
  p_subscription uuid, p_room integer, p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer,
  p_max_bytes bigint
) RETURNS TABLE (
  subscription_id uuid, aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean,
  charged boolean, watch_starts boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, payload_bytes bigint,
  created_at timestamptz, attempts integer, failing_ms bigint,
  window_full boolean, budget_full boolean, probe boolean
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_limited boolean;
  v_room integer;
  v_types text[];
  v_ids text[];
  v_tokens uuid[];
  v_taken boolean[];
  v_charged boolean[];
  v_watch boolean[];
  v_conflicts integer[];
  v_window_full boolean;
  v_budget_full boolean;
BEGIN
  -- See 0007: a claim need not wait for its WAL flush, and its statements keep one plan per connection.
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT sub.max_in_flight IS NOT NULL OR sub.rate_per_second IS NOT NULL OR sub.breaker_state = 'open',
         CASE
         WHEN sub.state = 'disabled' AND sub.id <> '00000000-0000-0000-0000-000000000000' THEN 0
         -- A Retry-After from the endpoint slows all of its lanes, not only the one that got it.
         WHEN sub.throttled_until > now() THEN 0
         ELSE p_room END
  INTO v_limited, v_room
  FROM ${s}.outbox_subscription sub
  WHERE sub.id = p_subscription;
  -- Limited (or not found, which 0012's claim also answers): the general claim, with its locks, counts and probe.
  IF v_limited IS NOT FALSE THEN
    RETURN QUERY
      SELECT * FROM ${s}.outbox_claim_subscription_lanes(
        ARRAY[p_subscription], ARRAY[p_room], p_lanes, p_lease_ms, p_scan_rows, p_batch, p_max_bytes);
    RETURN;
  END IF;
  -- Every join below looks rows up by key from a small set (the due lanes, the claimed ones): nested loops. Without
  -- this, the generic plan, which cannot know the room, took the due set for a thousand rows and hashed the whole
  -- lane table instead, testing every lane's head (12-22 ms per claim of 8-32 lanes beside 1,000 lanes). Set after
  -- the hand-over above, so the general claim always plans with the server's settings.
  PERFORM set_config('enable_hashjoin', 'off', true);
  PERFORM set_config('enable_mergejoin', 'off', true);
  -- The earliest due time, not EXISTS: a generic plan of EXISTS assumes matching rows are common and may scan the
  -- whole table for the first one (a healthy subscription beside another's backlog of pending rows: 20-40 ms per
  -- empty check), while min() is read from the end of the due index whatever the statistics say.
  IF v_room <= 0 OR NOT coalesce((
    SELECT min(o.available_at) FROM ${s}.outbox o
    WHERE o.subscription_id = p_subscription AND o.status = 'pending'
  ) <= now(), false) THEN
    RETURN;
  END IF;
  WITH due AS (
    SELECT o.subscription_id, o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due,
           count(*) AS rows_scanned
    FROM (
      SELECT o.subscription_id, o.aggregate_type, o.aggregate_id, o.available_at
      FROM ${s}.outbox o
      WHERE o.subscription_id = p_subscription AND o.status = 'pending' AND o.available_at <= now()
        AND (o.aggregate_type, o.aggregate_id) NOT IN (
          SELECT busy.aggregate_type, busy.aggregate_id FROM ${s}.outbox_lane busy
          WHERE busy.subscription_id = p_subscription AND busy.claim_token IS NOT NULL
            AND busy.leased_until > now()
        )
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane parked
          WHERE parked.subscription_id = o.subscription_id AND parked.aggregate_type = o.aggregate_type
            AND parked.aggregate_id = o.aggregate_id AND parked.blocked_reason = 'exhausted'
        )
      ORDER BY o.available_at
      LIMIT least(p_scan_rows, v_room * 8)
    ) o
    GROUP BY o.subscription_id, o.aggregate_type, o.aggregate_id
  ), picked AS (
    SELECT l.subscription_id, l.aggregate_type, l.aggregate_id, d.first_due, l.claim_token AS old_token,
           (l.claim_token IS NOT NULL AND l.started_token IS NOT DISTINCT FROM l.claim_token) AS charged,
           l.watch_starts,
           (
             SELECT coalesce(head.payload_bytes, octet_length(head.payload::text)) FROM ${s}.outbox head
             WHERE head.subscription_id = l.subscription_id AND head.aggregate_type = l.aggregate_type
               AND head.aggregate_id = l.aggregate_id AND head.status = 'pending'
             ORDER BY head.sequence
             LIMIT 1
           ) AS head_bytes
    FROM (SELECT due.* FROM due ORDER BY due.first_due) d
    -- Joined on all three key columns of the due row (not the parameter): the lane is then one probe of its primary
    -- key, whatever the statistics the cached generic plan was made from say about the subscription's lane count.
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
    LIMIT least(p_lanes, v_room)
    FOR UPDATE OF l SKIP LOCKED
  ), fitting AS (
    SELECT p.*, sum(p.head_bytes) OVER w AS running, row_number() OVER w AS pos
    FROM picked p
    WINDOW w AS (ORDER BY p.first_due, p.aggregate_type, p.aggregate_id ROWS UNBOUNDED PRECEDING)
  ), claimed AS (
    UPDATE ${s}.outbox_lane l
    SET claim_token = gen_random_uuid(), leased_until = now() + p_lease_ms * interval '1 millisecond',
        watch_starts = f.watch_starts OR f.old_token IS NOT NULL, started_token = NULL,
        blocked_reason = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
        blocked_at = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END
    FROM fitting f
    WHERE l.subscription_id = f.subscription_id AND l.aggregate_type = f.aggregate_type
      AND l.aggregate_id = f.aggregate_id AND (f.running <= p_max_bytes OR f.pos = 1)
    RETURNING l.aggregate_type, l.aggregate_id, l.claim_token, f.old_token IS NOT NULL AS taken_over, f.charged,
              l.watch_starts, l.conflict_count, f.pos
  )
  SELECT array_agg(c.aggregate_type ORDER BY c.pos), array_agg(c.aggregate_id ORDER BY c.pos),
         array_agg(c.claim_token ORDER BY c.pos), array_agg(c.taken_over ORDER BY c.pos),
         array_agg(c.charged ORDER BY c.pos), array_agg(c.watch_starts ORDER BY c.pos),
         array_agg(c.conflict_count ORDER BY c.pos),
         coalesce((SELECT sum(due.rows_scanned) >= least(p_scan_rows, v_room * 8) FROM due), false),
         (SELECT count(*) FROM fitting) > count(*)
  INTO v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts, v_window_full, v_budget_full
  FROM claimed c;
  IF v_tokens IS NULL THEN
    RETURN;
  END IF;
  -- As in 0007 and 0012: a fresh snapshot, rows read heads first within the byte budget.
  RETURN QUERY
    SELECT p_subscription, c.aggregate_type, c.aggregate_id, c.claim_token, c.taken_over, c.charged,
           c.watch_starts, c.conflict_count,
           o.id, o.event_id, o.sequence, o.event_type, o.payload::text, k.bytes, o.created_at, o.attempts,
           (extract(epoch FROM now() - o.first_failed_at) * 1000)::bigint,
           v_window_full, v_budget_full, false
    FROM unnest(v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts)
      WITH ORDINALITY
      AS c(aggregate_type, aggregate_id, claim_token, taken_over, charged, watch_starts, conflict_count, n)
    LEFT JOIN (
      SELECT r.n, r.id, r.bytes
      FROM (
        SELECT e.n, e.id, e.bytes, sum(e.bytes) OVER w AS running, row_number() OVER w AS pos
        FROM (
          SELECT lane.n, candidate.id, candidate.bytes, candidate.rank
          FROM unnest(v_types, v_ids) WITH ORDINALITY AS lane(aggregate_type, aggregate_id, n)
          CROSS JOIN LATERAL (
            SELECT o.id, coalesce(o.payload_bytes, octet_length(o.payload::text))::bigint AS bytes,
                   row_number() OVER (ORDER BY o.sequence) AS rank
            FROM ${s}.outbox o
            WHERE o.subscription_id = p_subscription AND o.aggregate_type = lane.aggregate_type
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
