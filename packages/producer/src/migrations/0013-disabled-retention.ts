/**
 * Migration 0013: what the disabled retention dropped. Self-contained and frozen once merged: a later change is a
 * new migration with its own full text.
 *
 * - `outbox_subscription.dropped_deliveries`: how many pending deliveries `prune({ disabledRetention })` has
 *   dropped from this subscription while it was disabled, cumulative over its life (enabling it does not reset
 *   it), so an operator can tell the customer how much it missed. `last_dropped_at`: when the last of them went.
 * - No index: the counter is written by prune once per batch under the subscription's row lock, and read with the
 *   subscription.
 */
export function migration0013(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox_subscription ADD COLUMN IF NOT EXISTS dropped_deliveries bigint NOT NULL DEFAULT 0;
ALTER TABLE ${s}.outbox_subscription ADD COLUMN IF NOT EXISTS last_dropped_at timestamptz;
`
}
