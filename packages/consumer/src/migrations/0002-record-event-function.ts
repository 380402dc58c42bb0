/**
 * Migration 0002: `outbox_record_event`, sql/record-event.ts's statement as a PL/pgSQL function. PL/pgSQL caches
 * the plans of its statements per connection, where the same statement sent as text with parameters was parsed
 * and planned by PostgreSQL on every delivery (≈ 110 µs more than a plain insert; Kysely cannot prepare
 * statements). The statement, its concurrency argument and its measured cost are explained there; this is the
 * same ONE statement, with the policy and `firstSequence` as parameters instead of being compiled into it.
 *
 * No `SET plan_cache_mode = force_generic_plan` clause: measured (one connection, 4000 calls), the default mode
 * was as fast — 322 and 344 µs per applying call against 333 and 351 µs forced on PostgreSQL 15, 653 against
 * 650 µs on 18 — since it settles on the generic plan by itself, while a SET clause saves and restores the
 * setting on every call. `force_custom_plan` (re-planning every call) cost 60–80 µs more. Nor
 * `set_config(…, true)` as in the producer's claim: that would last to COMMIT, into the application's handler.
 *
 * `CREATE OR REPLACE` keeps it safe to run twice, like the `IF NOT EXISTS` of migration 0001. `schema` is the
 * schema's name as given (quoted here as an identifier), or `undefined` for the search_path.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0002(schema: string | undefined): string {
  const s = schema === undefined ? '' : `"${schema.replaceAll('"', '""')}".`
  // The body is dollar-quoted text: its tag must not occur in it (a schema name may contain anything).
  let tag = '$fn$'
  for (let n = 1; s.includes(tag); n++) tag = `$fn${n}$`
  return `CREATE OR REPLACE FUNCTION ${s}"outbox_record_event"(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
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
  WITH recorded AS (
    INSERT INTO ${s}"processed_events" (event_id, aggregate_type, aggregate_id, sequence, type)
    VALUES (p_event_id, p_aggregate_type, p_aggregate_id, p_sequence, p_type)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING aggregate_type, aggregate_id
  ), advanced AS (
    INSERT INTO ${s}"consumer_cursors" AS c (aggregate_type, aggregate_id, last_sequence)
    SELECT r.aggregate_type, r.aggregate_id, p_initial_cursor FROM recorded r
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = p_sequence, updated_at = now()
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
`
}
