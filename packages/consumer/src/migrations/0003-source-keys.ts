/**
 * Migration 0003: every row is keyed by the consumer's `source` (the sender it receives from), so two senders that
 * reuse an event id or an aggregate key — Stripe and this project's relay, two producers, a producer whose counters
 * were reset — never collide; and `processed_events` takes any sender's events.
 *
 * - `processed_events`: a `source` column (`'default'` for every existing row and for any insert that names no
 *   source), `event_id` from `uuid` to `text` (Stripe's ids are `evt_…`; a uuid becomes its canonical lower-case
 *   text), the primary key `(source, event_id)`, and `aggregate_type`, `aggregate_id` and `sequence` nullable for
 *   senders that have no aggregates or sequences (recorded under `sequence: 'off'`). The sequence check stays.
 * - `consumer_cursors`: a `source` column (same default), the primary key `(source, aggregate_type, aggregate_id)`.
 * - `outbox_record_event(p_source, …)`: migration 0002's statement keyed by source, with `text` ids.
 * - The 0002 signature `outbox_record_event(uuid, …)` stays, as a wrapper calling the new one with `'default'`: a
 *   consumer of the previous version, still running during a rolling deploy, keeps recording and ordering its events
 *   against the migrated schema (under the source its rows were given here).
 *
 * What it locks: changing `event_id`'s type rewrites `processed_events` and the primary keys are rebuilt, each
 * table under an ACCESS EXCLUSIVE lock held until the migration commits — deliveries wait for it (measured in the
 * README's upgrade section). One `ALTER TABLE` per table, so each is rewritten and indexed once: PostgreSQL runs
 * the `DROP CONSTRAINT` before the type change and the new key's index after it. `processed_events` is altered
 * before `consumer_cursors`, the order every delivery locks them in, so a delivery and the migration never
 * deadlock. The `source` columns come with a constant default, which PostgreSQL (11+) stores without rewriting.
 *
 * Each table is altered only when it has no `source` column yet, so the script can run again (as 0001's
 * `IF NOT EXISTS`) without rebuilding anything. `schema` is the schema's name as given (quoted here as an
 * identifier), or `undefined` for the search_path.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0003(schema: string | undefined): string {
  const s = schema === undefined ? '' : `"${schema.replaceAll('"', '""')}".`
  // The bodies are dollar-quoted text: the tag must not occur in them (a schema name may contain anything).
  let tag = '$fn$'
  for (let n = 1; s.includes(tag); n++) tag = `$fn${n}$`
  // The tables' names as string literals, for to_regclass inside the DO block.
  const literal = (table: string) => `'${`${s}"${table}"`.replaceAll("'", "''")}'`
  const hasSource = (table: string) =>
    `EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(${literal(table)}) AND attname = 'source' AND NOT attisdropped)`
  return `DO ${tag}
BEGIN
  IF NOT ${hasSource('processed_events')} THEN
    ALTER TABLE ${s}"processed_events"
      ADD COLUMN "source" text DEFAULT 'default' NOT NULL,
      DROP CONSTRAINT "processed_events_pkey",
      ALTER COLUMN "event_id" TYPE text,
      ALTER COLUMN "aggregate_type" DROP NOT NULL,
      ALTER COLUMN "aggregate_id" DROP NOT NULL,
      ALTER COLUMN "sequence" DROP NOT NULL,
      ADD CONSTRAINT "processed_events_pkey" PRIMARY KEY ("source", "event_id");
  END IF;
  IF NOT ${hasSource('consumer_cursors')} THEN
    ALTER TABLE ${s}"consumer_cursors"
      ADD COLUMN "source" text DEFAULT 'default' NOT NULL,
      DROP CONSTRAINT "consumer_cursors_pkey",
      ADD CONSTRAINT "consumer_cursors_pkey" PRIMARY KEY ("source", "aggregate_type", "aggregate_id");
  END IF;
END
${tag};
CREATE OR REPLACE FUNCTION ${s}"outbox_record_event"(
  p_source text, p_event_id text, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
  p_policy text, p_first_sequence text, p_initial_cursor bigint
) RETURNS text LANGUAGE plpgsql AS ${tag}
DECLARE
  v_cursor bigint;
BEGIN
  -- The callers pass only these; anything else would silently judge every event as not applying.
  IF p_policy NOT IN ('monotonic', 'strict') OR p_first_sequence NOT IN ('1', 'any') THEN
    RAISE EXCEPTION 'outbox_record_event: unknown policy % / first sequence %', p_policy, p_first_sequence
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- An ordered policy needs the aggregate and the sequence (the consumer refuses such events before calling).
  IF p_aggregate_type IS NULL OR p_aggregate_id IS NULL OR p_sequence IS NULL THEN
    RAISE EXCEPTION 'outbox_record_event: an ordered event needs its aggregate and sequence'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH recorded AS (
    INSERT INTO ${s}"processed_events" (source, event_id, aggregate_type, aggregate_id, sequence, type)
    VALUES (p_source, p_event_id, p_aggregate_type, p_aggregate_id, p_sequence, p_type)
    ON CONFLICT (source, event_id) DO NOTHING
    RETURNING aggregate_type, aggregate_id
  ), advanced AS (
    INSERT INTO ${s}"consumer_cursors" AS c (source, aggregate_type, aggregate_id, last_sequence)
    SELECT p_source, r.aggregate_type, r.aggregate_id, p_initial_cursor FROM recorded r
    ON CONFLICT (source, aggregate_type, aggregate_id) DO UPDATE SET last_sequence = p_sequence, updated_at = now()
    -- "Apply?": judgeSequence(policy, firstSequence, cursor, sequence).kind === 'apply' (src/cursor.ts), proven
    -- equal to it by a property test against this function (cursor.policies.test.ts).
    WHERE CASE p_policy
      WHEN 'monotonic' THEN c.last_sequence < p_sequence
      ELSE c.last_sequence = p_sequence - 1 OR (p_first_sequence = 'any' AND c.last_sequence = 0)
    END
    RETURNING c.last_sequence
  )
  SELECT (SELECT a.last_sequence FROM advanced a) INTO v_cursor FROM recorded;
  IF NOT FOUND THEN
    RETURN 'duplicate';
  END IF;
  RETURN CASE WHEN v_cursor = p_sequence THEN 'advanced' ELSE 'held' END;
END
${tag};
-- The previous version's call, kept for consumers still running it during a rolling deploy: its rows are the
-- default source's, and its uuid id is recorded as the canonical text the type change gave the existing rows.
CREATE OR REPLACE FUNCTION ${s}"outbox_record_event"(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
  p_policy text, p_first_sequence text, p_initial_cursor bigint
) RETURNS text LANGUAGE sql AS ${tag}
  SELECT ${s}"outbox_record_event"('default', p_event_id::text, p_aggregate_type, p_aggregate_id, p_sequence,
    p_type, p_policy, p_first_sequence, p_initial_cursor)
${tag};
`
}
