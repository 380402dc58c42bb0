/**
 * Migration 0004: `processed_events.payload_digest`, the digest of the event as its envelope reader produced it
 * (type, aggregate, sequence, data), so a repeated id carrying another payload is told apart from a retry; and
 * `outbox_record_event(…, p_digest)`, migration 0003's statement recording that digest and, for a duplicate,
 * answering `mismatch` when the recorded digest differs.
 *
 * - The column is nullable and has no default: PostgreSQL (11+) adds it without rewriting the table or holding
 *   its lock beyond the catalog change. Rows recorded before (and by a previous consumer during a rolling deploy)
 *   keep NULL, which never reports a mismatch — a digest is only compared with a digest.
 * - The new overload takes one more parameter. The duplicate path stays ONE call in one round trip: after the
 *   insert found the id, the function reads the recorded digest by primary key (a later statement in the
 *   function, so at READ COMMITTED it sees the row a concurrent first delivery just committed).
 * - 0003's nine-parameter function stays as it is, for the previous version still running during a rolling deploy.
 *
 * `schema` is the schema's name as given (quoted here as an identifier), or `undefined` for the search_path.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0004(schema: string | undefined): string {
  const s = schema === undefined ? '' : `"${schema.replaceAll('"', '""')}".`
  // The body is dollar-quoted text: the tag must not occur in it (a schema name may contain anything).
  let tag = '$fn$'
  for (let n = 1; s.includes(tag); n++) tag = `$fn${n}$`
  return `ALTER TABLE ${s}"processed_events" ADD COLUMN IF NOT EXISTS "payload_digest" text;
CREATE OR REPLACE FUNCTION ${s}"outbox_record_event"(
  p_source text, p_event_id text, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
  p_policy text, p_first_sequence text, p_initial_cursor bigint, p_digest text
) RETURNS text LANGUAGE plpgsql AS ${tag}
DECLARE
  v_cursor bigint;
  v_recorded_digest text;
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
    INSERT INTO ${s}"processed_events" (source, event_id, aggregate_type, aggregate_id, sequence, type, payload_digest)
    VALUES (p_source, p_event_id, p_aggregate_type, p_aggregate_id, p_sequence, p_type, p_digest)
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
    SELECT payload_digest INTO v_recorded_digest FROM ${s}"processed_events"
    WHERE source = p_source AND event_id = p_event_id;
    RETURN CASE WHEN v_recorded_digest IS DISTINCT FROM p_digest AND v_recorded_digest IS NOT NULL
      AND p_digest IS NOT NULL THEN 'mismatch' ELSE 'duplicate' END;
  END IF;
  RETURN CASE WHEN v_cursor = p_sequence THEN 'advanced' ELSE 'held' END;
END
${tag};
`
}
