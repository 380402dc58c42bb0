/**
 * Migration 0011: the audit log of operator actions. Self-contained and frozen once merged: a later change is a new
 * migration with its own full text.
 *
 * - `outbox_audit`: one row per action an operator took on lanes, dead letters or the schema's integrity (unblock,
 *   skip a head, redrive, discard, repair), written in the action's own transaction, so a row exists exactly when
 *   the action committed. `actor` is who (the console's `authorize` result, `'token'`, the CLI's `--actor` or the
 *   OS user); `target` and `result` are JSON documents describing what was asked and what happened.
 * - No retention of its own and no foreign keys: an audit outlives the rows it names. Index on `(at, id)` for the
 *   newest-first page.
 */
export function migration0011(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE TABLE IF NOT EXISTS ${s}.outbox_audit (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  actor text NOT NULL,
  action text NOT NULL,
  target jsonb NOT NULL,
  result jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_audit_time_idx ON ${s}.outbox_audit (at, id);
`
}
