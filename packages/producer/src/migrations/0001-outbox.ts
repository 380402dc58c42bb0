/**
 * Migration 0001: the `outbox` table (one row per event), the per-aggregate `outbox_counter` and the
 * relay's `outbox_lane`, with the partial indexes that keep the relay's work proportional to pending rows.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0001(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE TABLE IF NOT EXISTS ${s}.outbox (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id uuid NOT NULL UNIQUE,
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  sequence bigint NOT NULL,
  event_type text NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dead')),
  available_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0,
  last_attempt_at timestamptz,
  last_status integer,
  last_error text,
  delivery_status text,
  sent_at timestamptz,
  dead_at timestamptz,
  UNIQUE (aggregate_type, aggregate_id, sequence)
);
-- A lane's head and the rows behind it, pending rows only: stays small however many sent rows pile up.
CREATE INDEX IF NOT EXISTS outbox_pending_lane_idx
  ON ${s}.outbox (aggregate_type, aggregate_id, sequence) INCLUDE (available_at) WHERE status = 'pending';
-- Due pending rows in time order: the claim starts here, so lanes waiting in backoff are never scanned.
CREATE INDEX IF NOT EXISTS outbox_due_idx
  ON ${s}.outbox (available_at) INCLUDE (aggregate_type, aggregate_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_sent_idx ON ${s}.outbox (sent_at) WHERE status = 'sent';
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON ${s}.outbox (dead_at) WHERE status = 'dead';

CREATE TABLE IF NOT EXISTS ${s}.outbox_counter (
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  last_sequence bigint NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE TABLE IF NOT EXISTS ${s}.outbox_lane (
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  claim_token uuid,
  leased_until timestamptz,
  blocked_reason text CHECK (blocked_reason IN ('conflict', 'exhausted')),
  blocked_at timestamptz,
  conflict_count integer NOT NULL DEFAULT 0,
  PRIMARY KEY (aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS outbox_lane_leased_idx ON ${s}.outbox_lane (leased_until) WHERE claim_token IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_lane_blocked_idx ON ${s}.outbox_lane (blocked_at) WHERE blocked_reason IS NOT NULL;
`
}
