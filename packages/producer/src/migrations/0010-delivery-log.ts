/**
 * Migration 0010: the delivery log. Self-contained and frozen once merged: a later change is a new migration with
 * its own full text.
 *
 * - `outbox_delivery_attempt`: one row per request the relay made (and per attempt a takeover charged), per
 *   subscription: when, how long, the HTTP status, what became of it (`delivered`, `failed`, `conflict` for a 409
 *   park, `dead` for the attempt that dead-lettered the event), the first 500 characters of the answer's body and,
 *   when no answer came, the error. The relay writes these rows in the statements it already runs (the mark flush,
 *   the failure outcomes), so the log costs no round trip of its own.
 * - No foreign key to `outbox`: the log answers "did we send it?" after the event itself was pruned, and is pruned
 *   by its own retention (`prune({ deliveryLogRetention })`). It grows until pruned.
 * - Indexes, each for one question, kept few because every delivery pays for each of them: `(attempted_at, id)`
 *   for retention and the unfiltered newest-first page; `(subscription_id, attempted_at, id)` for one
 *   subscription's history; `(event_id)` for one event's attempts everywhere; `(aggregate_type, aggregate_id,
 *   attempted_at)` for one aggregate's.
 */
export function migration0010(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE TABLE IF NOT EXISTS ${s}.outbox_delivery_attempt (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL,
  event_id uuid NOT NULL,
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  sequence bigint NOT NULL,
  attempted_at timestamptz NOT NULL,
  duration_ms integer,
  http_status integer,
  outcome text NOT NULL CHECK (outcome IN ('delivered', 'failed', 'conflict', 'dead')),
  answer text,
  error text
);
CREATE INDEX IF NOT EXISTS outbox_delivery_attempt_time_idx
  ON ${s}.outbox_delivery_attempt (attempted_at, id);
CREATE INDEX IF NOT EXISTS outbox_delivery_attempt_subscription_idx
  ON ${s}.outbox_delivery_attempt (subscription_id, attempted_at, id);
CREATE INDEX IF NOT EXISTS outbox_delivery_attempt_event_idx
  ON ${s}.outbox_delivery_attempt (event_id);
CREATE INDEX IF NOT EXISTS outbox_delivery_attempt_aggregate_idx
  ON ${s}.outbox_delivery_attempt (aggregate_type, aggregate_id, attempted_at);
`
}
