/**
 * Migration 0015: the trace context an event was enqueued under. Self-contained and frozen once merged: a later
 * change is a new migration with its own full text.
 *
 * - `outbox.trace_context`: the W3C trace context (`traceparent`, and `tracestate` when there is one) active when
 *   the event was enqueued, as a small JSON object; null when none was (no OpenTelemetry, or no span active). The
 *   relay continues that trace in its delivery spans and sends it on in the request's headers.
 * - `outbox_enqueue` with a trace context: a new overload, so the other overloads, and the cost of an enqueue
 *   without tracing, are unchanged (the producer calls this one only when a trace is active). It runs the fan-out
 *   overload in force and then sets the context on the rows it wrote (one per subscription, by the
 *   `(event_id, subscription_id)` index), in the caller's transaction. Why not a copy of the fan-out with the column
 *   in its INSERT: the fan-out's body is replaced by later migrations, and a copy would silently keep the old one
 *   for traced events only; the UPDATE of rows the same transaction inserted costs one index probe per
 *   subscription, which the enqueue benchmark reports.
 */
export function migration0015(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS trace_context text;

CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb,
  p_payload_bytes integer, p_tenant text, p_channel text, p_trace_context text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  v_sequence bigint;
BEGIN
  v_sequence := ${s}.outbox_enqueue(p_event_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload,
                                    p_payload_bytes, p_tenant, p_channel);
  IF p_trace_context IS NOT NULL THEN
    UPDATE ${s}.outbox SET trace_context = p_trace_context WHERE event_id = p_event_id;
  END IF;
  RETURN v_sequence;
END
$fn$;
`
}
