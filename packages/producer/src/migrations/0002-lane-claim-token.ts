/**
 * Migration 0002: the lanes' claim-token index. Every write a lane's owner makes (marks, release, retry, park,
 * dead letter) finds the lane by its claim token. Without this index each of them scanned the whole lane table,
 * which is never pruned and holds one row per aggregate ever seen: fine at a thousand aggregates, a full scan of
 * millions per flush in production. Only leased lanes are in it, so it stays as small as the relays' concurrency.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0002(schema: string): string {
  const s = `"${schema}"`
  return `
CREATE UNIQUE INDEX IF NOT EXISTS outbox_lane_claim_token_idx ON ${s}.outbox_lane (claim_token) WHERE claim_token IS NOT NULL;
`
}
