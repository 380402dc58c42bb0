import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** What recording a watched lane's start found. */
export type StartRecord =
  /** Recorded: the request may go. */
  | 'started'
  /** Not recorded: the head is suspect and the start was not made alone (see {@link markStarted}). */
  | 'suspect'
  /** Not recorded: the claim is no longer ours, so nothing may be sent. */
  | 'lost'

/**
 * Records that the owner of a watched lane is about to send its first request, fenced by the claim token, and
 * whether that request goes `alone` (nothing else in flight in its relay, every earlier mark written).
 *
 * Why: a lane is watched once a claim of it expired without an outcome. If this claim dies too, the next takeover
 * finds `started_token` equal to the dead claim's token and charges the head — so an event that kills every relay
 * that sends it cannot freeze its lane, while a lane that was only claimed (waiting in a relay's ready queue when it
 * died) is handed over free. `started_alone` tells that takeover whether the charge is proven (the request was the
 * only one in flight) or provisional (migration 0019).
 *
 * A suspect head (its takeover charges reached `maxAttempts`) may only be started alone: asked to start it
 * otherwise, nothing is written and the answer is `'suspect'`, so the relay isolates it first. A start made alone
 * also renews the lease by `leaseMs` (database time), since waiting for the relay's other requests to finish may
 * have used most of it; the caller counts its deadline from before this call. Only watched lanes pay this write,
 * once per claim.
 */
export async function markStarted(
  ctx: SqlContext,
  request: {
    readonly claimToken: string
    /** Row id of the lane's head, whose `suspect` flag decides. */
    readonly headId: string
    readonly alone: boolean
    /** The lease a start made alone renews. */
    readonly leaseMs: number
  },
): Promise<StartRecord> {
  const { claimToken, headId, alone, leaseMs } = request
  const outbox = sql.id(ctx.schema, 'outbox')
  const lane = sql.id(ctx.schema, 'outbox_lane')
  // Raw SQL: the head's flag and the fenced lane write in one statement, one round trip.
  const { rows } = await sql<{ started: boolean; suspect: boolean }>`
    WITH head AS (
      SELECT o.suspect FROM ${outbox} o WHERE o.id = ${headId} AND o.status = 'pending'
    ), started AS (
      UPDATE ${lane}
      SET started_token = ${claimToken}, started_alone = ${alone},
          leased_until = CASE WHEN ${alone} THEN now() + ${leaseMs} * interval '1 millisecond' ELSE leased_until END
      WHERE claim_token = ${claimToken} AND (${alone} OR NOT coalesce((SELECT h.suspect FROM head h), false))
      RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM started) AS started, coalesce((SELECT h.suspect FROM head h), false) AS suspect`.execute(
    ctx.db,
  )
  const row = rows[0]
  if (row?.started) return 'started'
  return row?.suspect && !alone ? 'suspect' : 'lost'
}
