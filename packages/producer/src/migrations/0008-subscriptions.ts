/**
 * Migration 0008: subscriptions. Self-contained and frozen once merged: a later change is a new migration with its
 * own full text.
 *
 * - `outbox_subscription`: one row per webhook destination — its URL, tenant, event-type filter, limits and state.
 *   The row with the nil id, named `default`, is the implicit subscription: the relay's `endpoint` option, which
 *   existed before subscriptions did. It has no URL (the operator configures it on the relay) and receives every
 *   event until it is disabled. A stored subscription that is disabled is paused: it keeps receiving rows, which
 *   no relay claims until it is enabled again.
 * - `outbox_subscription_secret`: each subscription's signing secrets; the one without `expires_at` is current, the
 *   others are kept until their rotation overlap ends, and the relay signs with all of them meanwhile.
 * - `outbox.subscription_id` and `outbox_lane.subscription_id`: an outbox row is now one event's delivery to one
 *   subscription, and a lane is (subscription, aggregate). Existing rows and lanes belong to the implicit
 *   subscription, so pending events keep their order through the upgrade. The sequence stays per aggregate, shared
 *   by every subscription: one event has one sequence wherever it goes.
 * - `outbox.tenant`: the tenant an event was enqueued for; a subscription with a tenant receives only its events.
 * - `outbox_enqueue` with a tenant fans the event out to every subscription that wants it, under the
 *   aggregate's counter lock. The previous overloads call it without a tenant, so a producer of the previous
 *   version keeps working.
 * - `outbox_insert_deliveries`: that fan-out for one event whose sequence is taken, shared with enqueueMany.
 * - `outbox_claim_lanes` over the subscriptions a relay serves, with a room per subscription and `maxInFlight`
 *   counted from live leases across relays. The previous claim overloads and `outbox_new_row_due` now refuse with
 *   SQLSTATE OB001: a relay or an enqueueMany of the previous version would ignore subscriptions, so it must stop
 *   and say to upgrade rather than deliver to the wrong place.
 */
export function migration0008(schema: string): string {
  const s = `"${schema}"`
  const refuse = (what: string) => `
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'OB001',
    MESSAGE = 'the outbox schema in "${schema}" is newer than this @outbox/producer (${what}): upgrade @outbox/producer';
END`
  return `
CREATE TABLE IF NOT EXISTS ${s}.outbox_subscription (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name text UNIQUE,
  url text,
  tenant text,
  event_types text[],
  state text NOT NULL DEFAULT 'enabled' CHECK (state IN ('enabled', 'disabled')),
  disabled_reason text,
  disabled_at timestamptz,
  on_exhausted text CHECK (on_exhausted IN ('skip', 'block')),
  max_in_flight integer CHECK (max_in_flight > 0),
  retry_schedule bigint[],
  request_timeout_ms integer CHECK (request_timeout_ms > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK (url IS NOT NULL OR id = '00000000-0000-0000-0000-000000000000')
);
INSERT INTO ${s}.outbox_subscription (id, name) VALUES ('00000000-0000-0000-0000-000000000000', 'default')
ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS ${s}.outbox_subscription_secret (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL REFERENCES ${s}.outbox_subscription (id) ON DELETE CASCADE,
  secret text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_subscription_secret_idx ON ${s}.outbox_subscription_secret (subscription_id);

ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS subscription_id uuid NOT NULL
  DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS tenant text;
ALTER TABLE ${s}.outbox_lane ADD COLUMN IF NOT EXISTS subscription_id uuid NOT NULL
  DEFAULT '00000000-0000-0000-0000-000000000000';

-- One event, one row per subscription: the event id and the aggregate's sequence are unique per subscription.
ALTER TABLE ${s}.outbox DROP CONSTRAINT IF EXISTS outbox_event_id_key;
ALTER TABLE ${s}.outbox DROP CONSTRAINT IF EXISTS outbox_aggregate_type_aggregate_id_sequence_key;
CREATE UNIQUE INDEX IF NOT EXISTS outbox_event_subscription_idx ON ${s}.outbox (event_id, subscription_id);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_delivery_sequence_idx
  ON ${s}.outbox (subscription_id, aggregate_type, aggregate_id, sequence);
DROP INDEX IF EXISTS ${s}.outbox_pending_lane_idx;
CREATE INDEX IF NOT EXISTS outbox_pending_lane_idx
  ON ${s}.outbox (subscription_id, aggregate_type, aggregate_id, sequence) INCLUDE (available_at)
  WHERE status = 'pending';
-- The claim scans each served subscription's due rows in time order.
DROP INDEX IF EXISTS ${s}.outbox_due_idx;
CREATE INDEX IF NOT EXISTS outbox_due_idx
  ON ${s}.outbox (subscription_id, available_at) INCLUDE (aggregate_type, aggregate_id) WHERE status = 'pending';
ALTER TABLE ${s}.outbox_lane DROP CONSTRAINT IF EXISTS outbox_lane_pkey;
ALTER TABLE ${s}.outbox_lane ADD PRIMARY KEY (subscription_id, aggregate_type, aggregate_id);
-- maxInFlight counts a subscription's live leases.
CREATE INDEX IF NOT EXISTS outbox_lane_subscription_leased_idx
  ON ${s}.outbox_lane (subscription_id) WHERE claim_token IS NOT NULL;

-- Whether a subscription's event-type filter takes a type: no filter takes all; an entry is an exact type or a
-- prefix ending in '*' ('order.*', or '*' alone).
CREATE OR REPLACE FUNCTION ${s}.outbox_type_matches(p_filter text[], p_event_type text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $fn$
  SELECT p_filter IS NULL OR p_event_type = ANY (p_filter) OR EXISTS (
    SELECT 1 FROM unnest(p_filter) f WHERE right(f, 1) = '*' AND starts_with(p_event_type, left(f, -1))
  )
$fn$;

-- One event whose sequence is taken (the caller holds the aggregate's counter row lock until commit): one row per
-- subscription that wants it, each behind its own lane. Returns how many subscriptions took it.
CREATE OR REPLACE FUNCTION ${s}.outbox_insert_deliveries(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_event_type text,
  p_payload jsonb, p_payload_bytes integer, p_tenant text
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_subscription uuid;
  v_blocked_reason text;
  v_due timestamptz;
  v_count integer := 0;
BEGIN
  -- A subscription created while this transaction is open either committed before this statement's snapshot (and
  -- is read here) or waits for this transaction: createSubscription takes outbox_counter in SHARE mode, which
  -- conflicts with the counter upsert above it. So no event committed after a subscription exists misses it.
  -- A disabled stored subscription keeps receiving rows (it is paused: its customer gets them once it is enabled);
  -- the implicit one disabled receives none, as it is disabled by operators who serve stored subscriptions only.
  FOR v_subscription IN
    SELECT sub.id FROM ${s}.outbox_subscription sub
    WHERE (sub.state = 'enabled' OR sub.id <> '00000000-0000-0000-0000-000000000000')
      AND (sub.tenant IS NULL OR sub.tenant = p_tenant)
      AND ${s}.outbox_type_matches(sub.event_types, p_event_type)
  LOOP
    v_due := NULL;
    v_blocked_reason := NULL;
    -- The lane is never locked here (DO NOTHING and a plain read take no row lock): an enqueue never waits on a
    -- relay holding the lane. A first event finds no lane and is due now.
    IF p_sequence = 1 THEN
      INSERT INTO ${s}.outbox_lane (subscription_id, aggregate_type, aggregate_id)
      VALUES (v_subscription, p_aggregate_type, p_aggregate_id) ON CONFLICT DO NOTHING;
      IF FOUND THEN
        v_due := now();
      END IF;
    END IF;
    IF v_due IS NULL THEN
      SELECT l.blocked_reason INTO v_blocked_reason FROM ${s}.outbox_lane l
      WHERE l.subscription_id = v_subscription AND l.aggregate_type = p_aggregate_type
        AND l.aggregate_id = p_aggregate_id;
      IF NOT FOUND THEN
        INSERT INTO ${s}.outbox_lane (subscription_id, aggregate_type, aggregate_id)
        VALUES (v_subscription, p_aggregate_type, p_aggregate_id) ON CONFLICT DO NOTHING;
      END IF;
      -- A lane parked by 'block' keeps the row out of the due index until a redrive; behind a head in backoff the
      -- row must not look due.
      IF v_blocked_reason = 'exhausted' THEN
        v_due := 'infinity';
      ELSE
        v_due := greatest(now(), coalesce((
          SELECT p.available_at FROM ${s}.outbox p
          WHERE p.subscription_id = v_subscription AND p.aggregate_type = p_aggregate_type
            AND p.aggregate_id = p_aggregate_id AND p.status = 'pending'
          ORDER BY p.sequence DESC LIMIT 1
        ), now()));
      END IF;
    END IF;
    INSERT INTO ${s}.outbox (event_id, subscription_id, tenant, aggregate_type, aggregate_id, sequence, event_type,
                             payload, payload_bytes, available_at)
    VALUES (p_event_id, v_subscription, p_tenant, p_aggregate_type, p_aggregate_id, p_sequence, p_event_type,
            p_payload, p_payload_bytes, v_due);
    v_count := v_count + 1;
  END LOOP;
  RETURN v_count;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb,
  p_payload_bytes integer, p_tenant text, p_channel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  v_sequence bigint;
BEGIN
  -- The counter row's lock orders the aggregate's writers until commit: sequence order is commit order. A redrive
  -- takes the same lock, so a lane is never resumed while an enqueue that read it as blocked is still open.
  INSERT INTO ${s}.outbox_counter AS c (aggregate_type, aggregate_id, last_sequence)
  VALUES (p_aggregate_type, p_aggregate_id, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + 1
  RETURNING c.last_sequence INTO v_sequence;
  IF ${s}.outbox_insert_deliveries(p_event_id, p_aggregate_type, p_aggregate_id, v_sequence, p_event_type, p_payload,
                                   p_payload_bytes, p_tenant) > 0 AND p_channel IS NOT NULL THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN v_sequence;
END
$fn$;

-- The previous versions' overloads: the same fan-out, without a tenant.
CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb,
  p_payload_bytes integer, p_channel text
) RETURNS bigint LANGUAGE sql AS $fn$
  SELECT ${s}.outbox_enqueue(p_event_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_payload_bytes,
                             NULL::text, p_channel)
$fn$;
CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb, p_channel text
) RETURNS bigint LANGUAGE sql AS $fn$
  SELECT ${s}.outbox_enqueue(p_event_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload, NULL::integer,
                             NULL::text, p_channel)
$fn$;

CREATE OR REPLACE FUNCTION ${s}.outbox_new_row_due(p_aggregate_type text, p_aggregate_id text)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $fn$${refuse('enqueueMany')}
$fn$;
-- The refusing overloads keep their return types, so they replace the working ones in place.
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(
  p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer
) RETURNS TABLE (
  aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, created_at timestamptz, attempts integer,
  window_full boolean
) LANGUAGE plpgsql AS $fn$${refuse('relay')}
$fn$;
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(
  p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer, p_max_bytes bigint
) RETURNS TABLE (
  aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean, charged boolean,
  watch_starts boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, payload_bytes bigint,
  created_at timestamptz, attempts integer, failing_ms bigint,
  window_full boolean, budget_full boolean
) LANGUAGE plpgsql AS $fn$${refuse('relay')}
$fn$;

-- 0007's claim over the subscriptions a relay serves. Changes: each served subscription's due rows are scanned
-- on their own (one backlogged subscription cannot fill the window of another); each subscription gets at most
-- its room of lanes, and the lanes are taken in turns (every subscription's first lane, then every second, …);
-- a subscription with maxInFlight gets no more than its limit minus its live leases across relays, counted under
-- its row lock so that two relays claiming at once cannot both use the same room.
CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(
  p_subscriptions uuid[], p_room integer[], p_lanes integer, p_lease_ms bigint, p_scan_rows integer,
  p_batch integer, p_max_bytes bigint
) RETURNS TABLE (
  subscription_id uuid, aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean,
  charged boolean, watch_starts boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, payload_bytes bigint,
  created_at timestamptz, attempts integer, failing_ms bigint,
  window_full boolean, budget_full boolean
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
  v_window_full boolean;
  v_budget_full boolean;
BEGIN
  -- See 0007: a claim need not wait for its WAL flush, and its statements keep one plan per connection.
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  -- Limited subscriptions' rows, locked in id order (no deadlock between relays), until this claim commits.
  PERFORM 1 FROM ${s}.outbox_subscription sub
  WHERE sub.id = ANY (p_subscriptions) AND sub.max_in_flight IS NOT NULL
  ORDER BY sub.id FOR NO KEY UPDATE;
  -- A statement of its own, so it reads with a fresh snapshot: the leases of claims committed while we waited.
  -- A stored subscription disabled since the relay last read its list gets no room.
  SELECT array_agg(greatest(0, CASE
           WHEN sub.state = 'disabled' AND sub.id <> '00000000-0000-0000-0000-000000000000' THEN 0
           WHEN sub.max_in_flight IS NULL THEN r.room ELSE least(r.room,
           sub.max_in_flight - (
             SELECT count(*) FROM ${s}.outbox_lane live
             WHERE live.subscription_id = r.id AND live.claim_token IS NOT NULL AND live.leased_until > now()
           )::integer) END) ORDER BY r.n)
  INTO v_room
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
  )
  SELECT array_agg(c.subscription_id ORDER BY c.pos), array_agg(c.aggregate_type ORDER BY c.pos),
         array_agg(c.aggregate_id ORDER BY c.pos), array_agg(c.claim_token ORDER BY c.pos),
         array_agg(c.taken_over ORDER BY c.pos), array_agg(c.charged ORDER BY c.pos),
         array_agg(c.watch_starts ORDER BY c.pos), array_agg(c.conflict_count ORDER BY c.pos),
         coalesce((SELECT scanned.full FROM scanned), false), (SELECT count(*) FROM fitting) > count(*)
  INTO v_subs, v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts, v_window_full, v_budget_full
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
           v_window_full, v_budget_full
    FROM unnest(v_subs, v_types, v_ids, v_tokens, v_taken, v_charged, v_watch, v_conflicts) WITH ORDINALITY
      AS c(subscription_id, aggregate_type, aggregate_id, claim_token, taken_over, charged, watch_starts,
           conflict_count, n)
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
