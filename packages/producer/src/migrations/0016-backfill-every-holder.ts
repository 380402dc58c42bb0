/**
 * Migration 0016: the backfill reads every subscription's rows. Self-contained and frozen once merged: a later change
 * is a new migration with its own full text.
 *
 * - `outbox_backfill_batch` (0014's, with its full text): 0014 read no row of a subscription whose tenant differed
 *   from the new one's, assuming it could not hold the new one's events. A subscription whose tenant was changed
 *   (`updateSubscription`) keeps the rows it was routed before the change, so an event retained only there was
 *   never copied (found by the model-based test). Every subscription's rows are read now; the new subscription's own
 *   tenant and event types still decide what is inserted.
 * - The copy carries `trace_context` (migration 0015), so a backfilled delivery continues the enqueue's trace too.
 */
export function migration0016(schema: string): string {
  const s = `"${schema}"`
  return `
-- One batch of a subscription's backfill: the retained events (an event is retained while any subscription still
-- has a row of it, whatever its status) of at most p_aggregates aggregates after the cursor, and at most p_rows
-- retained rows read, inserted for the subscription when its tenant and event types take them, pending and due
-- now, with the same event ids, sequences, types, payloads and created_at; then the cursor and the counts, in the
-- same transaction. Returns what happened:
--   'copied'  the batch committed and more is left;   'done'  the batch found the end: the state is 'done';
--   'waiting' a transaction holding an aggregate of the batch outlasted p_lock_timeout_ms: nothing was copied,
--             backfill_waiting_since says since when (try again later);
--   'busy'    another relay runs a batch of it now;   'none'  no backfill runs (done, never asked, or deleted).
--
-- Why it is safe without stopping enqueues: createSubscription takes outbox_counter in SHARE mode, so every event
-- whose sequence was taken after the subscription exists was fanned out to it by its enqueue, and every event
-- committed before is visible here. The batch copies only sequences the subscription does not have (ON CONFLICT DO
-- NOTHING), below or among those fanned out since; the relays claim none of its lanes meanwhile, so nothing is
-- delivered out of order.
--
-- Locks: the subscription row FOR NO KEY UPDATE SKIP LOCKED (two relays never copy the same batch, and neither
-- waits for the other; a secret rotation's foreign-key check is not held up), and each aggregate's counter row
-- FOR SHARE, in key order as enqueueMany locks them: an enqueue of the aggregate open now is waited for (at most
-- the lock timeout), and one starting meanwhile waits for this batch. The lock timeout is kept below PostgreSQL's
-- default deadlock_timeout (1 s), so in a lock cycle with an application transaction that enqueues aggregates out
-- of key order it is this batch that gives up, never the application's transaction.
CREATE OR REPLACE FUNCTION ${s}.outbox_backfill_batch(
  p_subscription uuid, p_aggregates integer, p_rows integer, p_lock_timeout_ms integer
) RETURNS TABLE (
  outcome text, aggregates_done bigint, aggregates_total bigint, events bigint, copied bigint,
  waiting_since timestamptz
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_sub record;
  v_total bigint;
  v_type text;
  v_id text;
  v_seq bigint;
  v_from bigint;
  v_agg record;
  v_fetched integer := 0;
  v_done bigint := 0;
  v_read bigint := 0;
  v_copied bigint := 0;
  v_partial boolean := false;
  v_n bigint;
  v_last bigint;
  v_c bigint;
  v_outcome text;
BEGIN
  SELECT sub.id, sub.tenant, sub.event_types, sub.backfill_cursor_type, sub.backfill_cursor_id,
         sub.backfill_cursor_sequence, sub.backfill_aggregates_total
  INTO v_sub
  FROM ${s}.outbox_subscription sub
  WHERE sub.id = p_subscription AND sub.backfill_state = 'running'
  FOR NO KEY UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN QUERY
      SELECT CASE WHEN sub.backfill_state = 'running' THEN 'busy' ELSE 'none' END, sub.backfill_aggregates_done,
             sub.backfill_aggregates_total, sub.backfill_events, 0::bigint, sub.backfill_waiting_since
      FROM (SELECT 1) one
      LEFT JOIN ${s}.outbox_subscription sub ON sub.id = p_subscription;
    RETURN;
  END IF;
  -- Counted once, by the first batch rather than by createSubscription: a count of a large counter table under
  -- createSubscription's SHARE lock would hold every enqueue back while it ran.
  v_total := v_sub.backfill_aggregates_total;
  IF v_total IS NULL THEN
    SELECT count(*) INTO v_total FROM ${s}.outbox_counter;
  END IF;
  v_type := v_sub.backfill_cursor_type;
  v_id := v_sub.backfill_cursor_id;
  v_seq := v_sub.backfill_cursor_sequence;
  BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    -- From the cursor's aggregate itself (>=) when it was left half-way, else after it. '' is below every text,
    -- so a first batch starts at the beginning, and the comparison stays an index condition on the counter's key.
    FOR v_agg IN
      SELECT c.aggregate_type, c.aggregate_id FROM ${s}.outbox_counter c
      WHERE (c.aggregate_type, c.aggregate_id) >= (coalesce(v_type, ''), coalesce(v_id, ''))
        AND NOT (v_seq IS NULL AND v_type IS NOT NULL AND c.aggregate_type = v_type AND c.aggregate_id = v_id)
      ORDER BY c.aggregate_type, c.aggregate_id
      LIMIT p_aggregates
      FOR SHARE OF c
    LOOP
      v_fetched := v_fetched + 1;
      IF v_agg.aggregate_type = v_type AND v_agg.aggregate_id = v_id THEN
        v_from := v_seq;
      ELSE
        v_from := 0;
      END IF;
      -- The aggregate's retained events above v_from, one row per sequence, read through each other
      -- subscription's (subscription_id, aggregate_type, aggregate_id, sequence) index: one short range per
      -- subscription, never a scan of the table. Every subscription is read, whatever its tenant: one whose tenant
      -- was changed still holds the events it was routed before (0014 skipped them, and missed an event retained
      -- only there).
      WITH candidates AS (
        SELECT DISTINCT ON (r.sequence) r.event_id, r.tenant, r.sequence, r.event_type, r.payload, r.payload_bytes,
               r.created_at, r.trace_context
        FROM ${s}.outbox_subscription other
        CROSS JOIN LATERAL (
          SELECT o.event_id, o.tenant, o.sequence, o.event_type, o.payload, o.payload_bytes, o.created_at,
                 o.trace_context
          FROM ${s}.outbox o
          WHERE o.subscription_id = other.id AND o.aggregate_type = v_agg.aggregate_type
            AND o.aggregate_id = v_agg.aggregate_id AND o.sequence > v_from
          ORDER BY o.sequence
          LIMIT p_rows - v_read
        ) r
        WHERE other.id <> p_subscription
        ORDER BY r.sequence
        LIMIT p_rows - v_read
      ), inserted AS (
        -- No conflict target: a sequence the subscription has (fanned out since it was created, or copied by an
        -- earlier batch) is skipped, and so is an event id it has, whichever unique index finds it first.
        INSERT INTO ${s}.outbox (event_id, subscription_id, tenant, aggregate_type, aggregate_id, sequence, event_type,
                                 payload, payload_bytes, created_at, trace_context, available_at)
        SELECT c.event_id, p_subscription, c.tenant, v_agg.aggregate_type, v_agg.aggregate_id, c.sequence,
               c.event_type, c.payload, c.payload_bytes, c.created_at, c.trace_context, now()
        FROM candidates c
        WHERE (v_sub.tenant IS NULL OR c.tenant = v_sub.tenant)
          AND ${s}.outbox_type_matches(v_sub.event_types, c.event_type)
        ON CONFLICT DO NOTHING
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM candidates), (SELECT max(c.sequence) FROM candidates c),
             (SELECT count(*) FROM inserted)
      INTO v_n, v_last, v_c;
      IF v_c > 0 THEN
        INSERT INTO ${s}.outbox_lane (subscription_id, aggregate_type, aggregate_id)
        VALUES (p_subscription, v_agg.aggregate_type, v_agg.aggregate_id) ON CONFLICT DO NOTHING;
      END IF;
      v_copied := v_copied + v_c;
      v_type := v_agg.aggregate_type;
      v_id := v_agg.aggregate_id;
      IF v_n >= p_rows - v_read THEN
        -- The row budget ran out in this aggregate: the next batch goes on above its last sequence read.
        v_seq := v_last;
        v_partial := true;
        EXIT;
      END IF;
      v_read := v_read + v_n;
      v_seq := NULL;
      v_done := v_done + 1;
    END LOOP;
    v_outcome := CASE WHEN NOT v_partial AND v_fetched < p_aggregates THEN 'done' ELSE 'copied' END;
    RETURN QUERY
      UPDATE ${s}.outbox_subscription sub
      SET backfill_state = CASE WHEN v_outcome = 'done' THEN 'done' ELSE 'running' END,
          backfill_finished_at = CASE WHEN v_outcome = 'done' THEN now() END,
          backfill_cursor_type = v_type, backfill_cursor_id = v_id, backfill_cursor_sequence = v_seq,
          backfill_aggregates_done = sub.backfill_aggregates_done + v_done,
          backfill_aggregates_total = v_total,
          backfill_events = sub.backfill_events + v_copied,
          backfill_waiting_since = NULL
      WHERE sub.id = p_subscription
      RETURNING v_outcome, sub.backfill_aggregates_done, sub.backfill_aggregates_total, sub.backfill_events,
                v_copied, sub.backfill_waiting_since;
  EXCEPTION WHEN lock_not_available THEN
    -- Everything the batch wrote is rolled back with its block; the stall is recorded, and the next try starts
    -- again from the same cursor.
    RETURN QUERY
      UPDATE ${s}.outbox_subscription sub
      SET backfill_waiting_since = coalesce(sub.backfill_waiting_since, now()),
          backfill_aggregates_total = v_total
      WHERE sub.id = p_subscription
      RETURNING 'waiting'::text, sub.backfill_aggregates_done, sub.backfill_aggregates_total, sub.backfill_events,
                0::bigint, sub.backfill_waiting_since;
  END;
END
$fn$;
`
}
