/**
 * Migration 0019: takeover charges stay provisional until an attempt made alone proves them. Self-contained and
 * frozen once merged: a later change is a new migration with its own full text.
 *
 * Why: a takeover charges the head of every lane whose request had started under the claim that died, because it
 * cannot tell the request that killed the relay from the requests beside it, nor from a 2xx whose mark the relay
 * never wrote. Counted as attempts, those charges dead-lettered innocent events beside a poison one, with no failed
 * answer of their own.
 *
 * - `outbox.takeover_charges`: attempts charged to the row at takeovers that proved nothing (its request was under
 *   way beside others, or answered and not yet marked). They are kept apart from `attempts`, which only ever counts
 *   failed answers, timeouts and takeovers proven by an attempt made alone: so they never exhaust an event.
 * - `outbox.suspect`: set once `attempts + takeover_charges` reaches the relay's `maxAttempts`: every further attempt
 *   of the row is made alone in its relay (nothing else in flight, every mark written first), until it is sent or
 *   dead-lettered. A relay dying during such an attempt is the row's own doing.
 * - `outbox_lane.started_alone`: whether the claim recorded in `started_token` started its request alone. A takeover
 *   that charges the head reads it: true is a proven attempt, false a provisional charge.
 *
 * The claim functions are unchanged: they still report `charged`, and the relay reads these columns only for the
 * lanes a takeover charges (and a watched lane's head as it records its start), so no claim reads more.
 */
export function migration0019(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER TABLE ${s}.outbox
  ADD COLUMN IF NOT EXISTS takeover_charges integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS suspect boolean NOT NULL DEFAULT false;

ALTER TABLE ${s}.outbox_lane
  ADD COLUMN IF NOT EXISTS started_alone boolean NOT NULL DEFAULT false;
`
}
