/**
 * Migration 0007: what the liveness rules need. Self-contained and frozen once merged: a later change is a new
 * migration with its own full text.
 *
 * - `outbox.first_failed_at`: when the row's first failed attempt happened (since it became pending or was last
 *   redriven). An event is dead-lettered only once it used `maxAttempts` attempts AND the schedule's horizon has
 *   passed since then, so a `Retry-After` can bring a retry forward but never the give-up.
 * - `outbox.payload_bytes`: the size of the payload as the relay sends it (jsonb's text form), measured by enqueue;
 *   NULL for rows written by an older producer (the claim then measures them itself). The claim spends a byte
 *   budget with it without converting payloads it will not return.
 * - `outbox_lane.watch_starts` and `outbox_lane.started_token`: a lane whose claim once expired without an outcome
 *   is watched; while it is, its owner records the claim token in `started_token` before its first request, so the
 *   next takeover charges the head an attempt only when a request really was under way. A lane claimed ahead and
 *   never started is handed over free, and no normal lane pays a write per request.
 * - `outbox_enqueue` with the payload size (a new overload: a producer of the previous version still calls the
 *   six-argument one, whose rows carry no size).
 * - `outbox_claim_lanes` with a byte budget, the takeover charge and the failing time (a new overload: a relay of
 *   the previous version still calls the four-argument one).
 */
export function migration0007(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS first_failed_at timestamptz;
ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS payload_bytes integer;
ALTER TABLE ${s}.outbox_lane ADD COLUMN IF NOT EXISTS watch_starts boolean NOT NULL DEFAULT false;
ALTER TABLE ${s}.outbox_lane ADD COLUMN IF NOT EXISTS started_token uuid;

-- 0005's function with the payload's size stored beside it.
CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb,
  p_payload_bytes integer, p_channel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  v_sequence bigint;
  v_blocked_reason text;
  v_due timestamptz;
BEGIN
  -- The counter row's lock orders the aggregate's writers until commit: sequence order is commit order. A redrive
  -- takes the same lock, so a lane is never resumed while an enqueue that read it as blocked is still open.
  INSERT INTO ${s}.outbox_counter AS c (aggregate_type, aggregate_id, last_sequence)
  VALUES (p_aggregate_type, p_aggregate_id, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + 1
  RETURNING c.last_sequence INTO v_sequence;
  -- The lane is never locked here (DO NOTHING and a plain read take no row lock): an enqueue never waits on a
  -- relay holding the lane.
  IF v_sequence = 1 THEN
    INSERT INTO ${s}.outbox_lane (aggregate_type, aggregate_id) VALUES (p_aggregate_type, p_aggregate_id)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
      v_due := now();
    END IF;
  END IF;
  IF v_due IS NULL THEN
    SELECT l.blocked_reason INTO v_blocked_reason FROM ${s}.outbox_lane l
    WHERE l.aggregate_type = p_aggregate_type AND l.aggregate_id = p_aggregate_id;
    IF NOT FOUND THEN
      INSERT INTO ${s}.outbox_lane (aggregate_type, aggregate_id) VALUES (p_aggregate_type, p_aggregate_id)
      ON CONFLICT DO NOTHING;
    END IF;
    -- A lane parked by 'block' keeps the row out of the due index until a redrive; behind a head in backoff the
    -- row must not look due.
    IF v_blocked_reason = 'exhausted' THEN
      v_due := 'infinity';
    ELSE
      v_due := greatest(now(), coalesce((
        SELECT p.available_at FROM ${s}.outbox p
        WHERE p.aggregate_type = p_aggregate_type AND p.aggregate_id = p_aggregate_id AND p.status = 'pending'
        ORDER BY p.sequence DESC LIMIT 1
      ), now()));
    END IF;
  END IF;
  INSERT INTO ${s}.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, payload_bytes,
                           available_at)
  VALUES (p_event_id, p_aggregate_type, p_aggregate_id, v_sequence, p_event_type, p_payload, p_payload_bytes, v_due);
  IF p_channel IS NOT NULL THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN v_sequence;
END
$fn$;

-- 0006's claim, with four changes: lanes are claimed only while their heads fit a byte budget, and the rows
-- behind the heads are read heads-first within it; a takeover says whether the expired claim had started a request
-- on a watched lane (charged) and watches the lane from now on; each row says how long it has been failing; a 409
-- park ends with the claim that retries it.
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(
  p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer, p_max_bytes bigint
) RETURNS TABLE (
  aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean, charged boolean,
  watch_starts boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, payload_bytes bigint,
  created_at timestamptz, attempts integer, failing_ms bigint,
  window_full boolean, budget_full boolean
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_types text[];
  v_ids text[];
  v_tokens uuid[];
  v_taken boolean[];
  v_charged boolean[];
  v_watch boolean[];
  v_conflicts integer[];
  v_scanned bigint;
  v_budget_full boolean;
BEGIN
  -- The claim is a lease, and the relay calls this in a transaction of its own, so both settings end with it.
  -- A claim need not wait for its WAL flush: if the server crashes before the flush the claim is simply gone, and
  -- another relay may take the lane early, sending again what this one sends: duplicates, absorbed by the
  -- consumer, never a loss or a reorder. The next durable commit (a mark, an enqueue) flushes it anyway.
  PERFORM set_config('synchronous_commit', 'off', true);
  -- One plan per connection for the statements below: the planner otherwise re-plans them per call while their
  -- custom plans look cheaper, about a third of a small claim's server time.
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  WITH due AS (
    SELECT o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due, count(*) AS rows_scanned
    FROM (
      SELECT o.aggregate_type, o.aggregate_id, o.available_at FROM ${s}.outbox o
      WHERE o.status = 'pending' AND o.available_at <= now()
        -- Leased lanes through a hashed NOT IN (a set as small as the relays' concurrency; exact, both key
        -- columns being NOT NULL); blocked lanes through NOT EXISTS, whose statistics see them (0006).
        AND (o.aggregate_type, o.aggregate_id) NOT IN (
          SELECT busy.aggregate_type, busy.aggregate_id FROM ${s}.outbox_lane busy
          WHERE busy.claim_token IS NOT NULL AND busy.leased_until > now()
        )
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane parked
          WHERE parked.aggregate_type = o.aggregate_type AND parked.aggregate_id = o.aggregate_id
            AND parked.blocked_reason = 'exhausted'
        )
      ORDER BY o.available_at
      LIMIT p_scan_rows
    ) o
    GROUP BY o.aggregate_type, o.aggregate_id
  ), picked AS (
    -- The head (lowest pending sequence) decides whether a lane is due, whatever the due time of rows behind it.
    -- No ORDER BY above the LIMIT: candidates stream in due order into the lane and head checks (see claimLanes).
    SELECT l.aggregate_type, l.aggregate_id, d.first_due, l.claim_token AS old_token,
           (l.claim_token IS NOT NULL AND l.started_token IS NOT DISTINCT FROM l.claim_token) AS charged, l.watch_starts,
           (
             SELECT coalesce(head.payload_bytes, octet_length(head.payload::text)) FROM ${s}.outbox head
             WHERE head.aggregate_type = l.aggregate_type AND head.aggregate_id = l.aggregate_id
               AND head.status = 'pending'
             ORDER BY head.sequence
             LIMIT 1
           ) AS head_bytes
    FROM (SELECT due.aggregate_type, due.aggregate_id, due.first_due FROM due ORDER BY due.first_due) d
    JOIN ${s}.outbox_lane l ON l.aggregate_type = d.aggregate_type AND l.aggregate_id = d.aggregate_id
    WHERE (l.claim_token IS NULL OR l.leased_until <= now())
      AND l.blocked_reason IS DISTINCT FROM 'exhausted'
      AND (
        SELECT head.available_at FROM ${s}.outbox head
        WHERE head.aggregate_type = l.aggregate_type AND head.aggregate_id = l.aggregate_id
          AND head.status = 'pending'
        ORDER BY head.sequence
        LIMIT 1
      ) <= now()
    LIMIT p_lanes
    FOR UPDATE OF l SKIP LOCKED
  ), fitting AS (
    -- Lanes whose heads fit the budget, in due order; the first lane always comes, or one event larger than the
    -- whole budget could never be sent.
    SELECT p.*, sum(p.head_bytes) OVER w AS running, row_number() OVER w AS pos
    FROM picked p
    WINDOW w AS (ORDER BY p.first_due, p.aggregate_type, p.aggregate_id ROWS UNBOUNDED PRECEDING)
  ), claimed AS (
    UPDATE ${s}.outbox_lane l
    SET claim_token = gen_random_uuid(), leased_until = now() + p_lease_ms * interval '1 millisecond',
        watch_starts = f.watch_starts OR f.old_token IS NOT NULL, started_token = NULL,
        -- A 409 park ends when its lane is claimed again: the lane is being retried, not waiting. Its count stays
        -- for the next park's delay until a delivery goes through.
        blocked_reason = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
        blocked_at = CASE WHEN l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END
    FROM fitting f
    WHERE l.aggregate_type = f.aggregate_type AND l.aggregate_id = f.aggregate_id
      AND (f.running <= p_max_bytes OR f.pos = 1)
    RETURNING l.aggregate_type, l.aggregate_id, l.claim_token, f.old_token IS NOT NULL AS taken_over, f.charged,
              l.watch_starts, l.conflict_count, f.pos
  )
  -- How many due rows the scan read: when it read all it was allowed, more due lanes may lie past its window, so
  -- the relay claims again at once. Whether the budget left picked lanes out: then only room helps.
  SELECT array_agg(c.aggregate_type ORDER BY c.pos), array_agg(c.aggregate_id ORDER BY c.pos),
         array_agg(c.claim_token ORDER BY c.pos), array_agg(c.taken_over ORDER BY c.pos),
         array_agg(c.charged ORDER BY c.pos), array_agg(c.watch_starts ORDER BY c.pos),
         array_agg(c.conflict_count ORDER BY c.pos),
         (SELECT sum(due.rows_scanned) FROM due), (SELECT count(*) FROM fitting) > count(*)
  INTO v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts, v_scanned, v_budget_full
  FROM claimed c;
  IF v_tokens IS NULL THEN
    RETURN;
  END IF;
  -- A statement of its own, so under READ COMMITTED it reads with a fresh snapshot: rows the lane's previous owner
  -- marked sent just before the claim are not sent again. The claimed lane rows stay locked until this call
  -- commits. The budget is spent heads first (every lane's head, then every lane's second row, …), so each kept
  -- run is its lane's contiguous prefix; sizes come from payload_bytes and only kept rows are turned into text.
  -- A lane whose head changed meanwhile and no longer fits comes back with no rows, and the relay hands it back.
  RETURN QUERY
    SELECT c.aggregate_type, c.aggregate_id, c.claim_token, c.taken_over, c.charged, c.watch_starts,
           c.conflict_count,
           o.id, o.event_id, o.sequence, o.event_type, o.payload::text, k.bytes, o.created_at, o.attempts,
           (extract(epoch FROM now() - o.first_failed_at) * 1000)::bigint,
           v_scanned >= p_scan_rows, v_budget_full
    FROM unnest(v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts) WITH ORDINALITY
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
            WHERE o.aggregate_type = lane.aggregate_type AND o.aggregate_id = lane.aggregate_id
              AND o.status = 'pending'
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
