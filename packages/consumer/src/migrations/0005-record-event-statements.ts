/**
 * Migration 0005: `outbox_record_event` as two plain statements, and for `sequence: 'off'` too.
 *
 * Same signature and results as 0004's (so `CREATE OR REPLACE` keeps its privileges, and a consumer of the previous
 * version calls it unchanged during a rolling deploy), with two changes:
 *
 * - The id insert and the cursor upsert are two statements of the function instead of one data-modifying CTE. The
 *   CTE materialised the inserted row for its sibling and ran the upsert's plan for a duplicate too (with no input);
 *   as two statements a duplicate stops after the insert. Measured against a hand-written `BEGIN`, id insert,
 *   `UPDATE`, `COMMIT` (16 loops, no HTTP, PostgreSQL 18, ten interleaved rounds of 1,000): apply 0.79× instead of
 *   0.77×, duplicate 0.69–0.78× instead of 0.65–0.70×. Nothing the CTE's single snapshot gave is lost: the id
 *   insert still waits on a concurrent delivery's key until it ends, and the upsert still locks and judges the
 *   latest committed cursor (`ON CONFLICT` never depends on the snapshot); the digest of a duplicate was already
 *   read by a later statement.
 * - `p_policy` may be `'off'`: the id (and the event's aggregate and sequence, NULL for another sender's event
 *   without them) is recorded and no cursor is read or written; the result is `'recorded'`. `sequence: 'off'` had
 *   its statement built by Kysely and planned by PostgreSQL at every delivery, which made the consumer that does
 *   the least work the slowest (0.65–0.81× the hand-written handler where the ordered one was 0.75–0.93×).
 *
 * `schema` is the schema's name as given (quoted here as an identifier), or `undefined` for the search_path.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0005(schema: string | undefined): string {
  const s = schema === undefined ? '' : `"${schema.replaceAll('"', '""')}".`
  // The body is dollar-quoted text: the tag must not occur in it (a schema name may contain anything).
  let tag = '$fn$'
  for (let n = 1; s.includes(tag); n++) tag = `$fn${n}$`
  return `CREATE OR REPLACE FUNCTION ${s}"outbox_record_event"(
  p_source text, p_event_id text, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
  p_policy text, p_first_sequence text, p_initial_cursor bigint, p_digest text
) RETURNS text LANGUAGE plpgsql AS ${tag}
DECLARE
  v_cursor bigint;
  v_recorded_digest text;
BEGIN
  -- The callers pass only these; anything else would silently judge every event as not applying.
  IF p_policy NOT IN ('monotonic', 'strict', 'off') OR p_first_sequence NOT IN ('1', 'any') THEN
    RAISE EXCEPTION 'outbox_record_event: unknown policy % / first sequence %', p_policy, p_first_sequence
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- An ordered policy needs the aggregate and the sequence (the consumer refuses such events before calling).
  IF p_policy <> 'off' AND (p_aggregate_type IS NULL OR p_aggregate_id IS NULL OR p_sequence IS NULL) THEN
    RAISE EXCEPTION 'outbox_record_event: an ordered event needs its aggregate and sequence'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- A concurrent delivery of the same id waits here on its key until that one ends: committed, nothing is
  -- inserted (a duplicate); rolled back, this one inserts and goes on (exactly one applies).
  INSERT INTO ${s}"processed_events" (source, event_id, aggregate_type, aggregate_id, sequence, type, payload_digest)
  VALUES (p_source, p_event_id, p_aggregate_type, p_aggregate_id, p_sequence, p_type, p_digest)
  ON CONFLICT (source, event_id) DO NOTHING;
  IF NOT FOUND THEN
    -- A later statement: at READ COMMITTED it sees the row a concurrent first delivery just committed.
    SELECT payload_digest INTO v_recorded_digest FROM ${s}"processed_events"
    WHERE source = p_source AND event_id = p_event_id;
    RETURN CASE WHEN v_recorded_digest IS DISTINCT FROM p_digest AND v_recorded_digest IS NOT NULL
      AND p_digest IS NOT NULL THEN 'mismatch' ELSE 'duplicate' END;
  END IF;
  IF p_policy = 'off' THEN
    RETURN 'recorded';
  END IF;
  -- ON CONFLICT locks the cursor row even when the WHERE is false, and judges its latest committed version: the
  -- second of two events of one aggregate waits for the first to end, then judges the cursor it left.
  INSERT INTO ${s}"consumer_cursors" AS c (source, aggregate_type, aggregate_id, last_sequence)
  VALUES (p_source, p_aggregate_type, p_aggregate_id, p_initial_cursor)
  ON CONFLICT (source, aggregate_type, aggregate_id) DO UPDATE SET last_sequence = p_sequence, updated_at = now()
  -- "Apply?": judgeSequence(policy, firstSequence, cursor, sequence).kind === 'apply' (src/cursor.ts), proven
  -- equal to it by a property test against this function (cursor.policies.test.ts).
  WHERE CASE p_policy
    WHEN 'monotonic' THEN c.last_sequence < p_sequence
    ELSE c.last_sequence = p_sequence - 1 OR (p_first_sequence = 'any' AND c.last_sequence = 0)
  END
  RETURNING c.last_sequence INTO v_cursor;
  RETURN CASE WHEN v_cursor = p_sequence THEN 'advanced' ELSE 'held' END;
END
${tag};
`
}
