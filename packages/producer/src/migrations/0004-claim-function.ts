/**
 * Migration 0004: the relay's claim and first read as ONE function call, `outbox_claim_lanes` (four
 * arguments): its plans are cached per connection (the two statements sent from the relay were parsed and planned
 * on every claim) and it costs one round trip, not two. The statements and the races they close are explained in
 * the relay's claimLanes. Its due scan skips busy lanes with one anti join, whose plan the planner took from
 * statistics that predate the leases (0006 replaced that check).
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0004(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer)
RETURNS TABLE (
  aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, created_at timestamptz, attempts integer,
  window_full boolean
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_types text[];
  v_ids text[];
  v_tokens uuid[];
  v_taken boolean[];
  v_conflicts integer[];
  v_scanned bigint;
BEGIN
  -- The claim is a lease, and the relay calls this in a transaction of its own, so both settings end with it.
  -- A claim need not wait for its WAL flush: if the server crashes before the flush the claim is simply gone, and
  -- another relay may take the lane early, sending again what this one sends: duplicates, absorbed by the
  -- consumer, never a loss or a reorder (each relay still sends a lane in order, one request at a time). The next
  -- durable commit (a mark, an enqueue) flushes it anyway. That flush was a fifth of a claim's time on a quiet lane.
  PERFORM set_config('synchronous_commit', 'off', true);
  -- One plan per connection for the statements below: the planner otherwise re-plans them per call while their
  -- custom plans look cheaper, about a third of a small claim's server time.
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  WITH due AS (
    SELECT o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due, count(*) AS rows_scanned
    FROM (
      SELECT o.aggregate_type, o.aggregate_id, o.available_at FROM ${s}.outbox o
      WHERE o.status = 'pending' AND o.available_at <= now()
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane busy
          WHERE busy.aggregate_type = o.aggregate_type AND busy.aggregate_id = o.aggregate_id
            AND ((busy.claim_token IS NOT NULL AND busy.leased_until > now()) OR busy.blocked_reason = 'exhausted')
        )
      ORDER BY o.available_at
      LIMIT p_scan_rows
    ) o
    GROUP BY o.aggregate_type, o.aggregate_id
  ), picked AS (
    SELECT l.aggregate_type, l.aggregate_id, (l.claim_token IS NOT NULL) AS taken_over
    FROM (SELECT due.aggregate_type, due.aggregate_id FROM due ORDER BY due.first_due) d
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
  ), claimed AS (
    UPDATE ${s}.outbox_lane l
    SET claim_token = gen_random_uuid(), leased_until = now() + p_lease_ms * interval '1 millisecond'
    FROM picked
    WHERE l.aggregate_type = picked.aggregate_type AND l.aggregate_id = picked.aggregate_id
    RETURNING l.aggregate_type, l.aggregate_id, l.claim_token, picked.taken_over, l.conflict_count
  )
  -- How many due rows the scan read: when it read all it was allowed, more due lanes may lie past its window, so
  -- the relay claims again at once instead of waiting (the window stays small: rows, not lanes, are its unit).
  SELECT array_agg(c.aggregate_type), array_agg(c.aggregate_id), array_agg(c.claim_token), array_agg(c.taken_over),
         array_agg(c.conflict_count), (SELECT sum(due.rows_scanned) FROM due)
  INTO v_types, v_ids, v_tokens, v_taken, v_conflicts, v_scanned
  FROM claimed c;
  IF v_tokens IS NULL THEN
    RETURN;
  END IF;
  -- A statement of its own, so under READ COMMITTED it reads with a fresh snapshot: rows the lane's previous owner
  -- marked sent just before the claim are not sent again. The claimed lane rows stay locked until this call
  -- commits, so no one can take them in between. A lane whose rows were all sent meanwhile comes back with none.
  RETURN QUERY
    SELECT c.aggregate_type, c.aggregate_id, c.claim_token, c.taken_over, c.conflict_count,
           e.id, e.event_id, e.sequence, e.event_type, e.payload::text, e.created_at, e.attempts,
           v_scanned >= p_scan_rows
    FROM unnest(v_types, v_ids, v_tokens, v_taken, v_conflicts) WITH ORDINALITY
      AS c(aggregate_type, aggregate_id, claim_token, taken_over, conflict_count, n)
    LEFT JOIN LATERAL (
      SELECT o.id, o.event_id, o.sequence, o.event_type, o.payload, o.created_at, o.attempts FROM ${s}.outbox o
      WHERE o.aggregate_type = c.aggregate_type AND o.aggregate_id = c.aggregate_id AND o.status = 'pending'
      ORDER BY o.sequence
      LIMIT p_batch
    ) e ON true
    ORDER BY c.n, e.sequence;
END
$fn$;
`
}
