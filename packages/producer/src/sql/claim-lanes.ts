import { type Kysely, sql } from 'kysely'
import type { LaneEventRow } from './select-lane-events.js'

/** A lane this relay now owns, with its first rows. */
export interface ClaimedLaneRow {
  aggregate_type: string
  aggregate_id: string
  claim_token: string
  /** The previous claim expired without releasing: its relay died or hung, maybe mid-request. */
  taken_over: boolean
  /** Consecutive 409 parks so far, for the growing park delay. */
  conflict_count: number
  /** The head and up to `batchSize - 1` rows behind it, in sequence order; none if all were sent meanwhile. */
  events: LaneEventRow[]
}

/** What one claim took. */
export interface ClaimResult {
  readonly lanes: ClaimedLaneRow[]
  /**
   * The due scan read all the rows it was allowed (`scanRows`): more due lanes may lie past its window, so claim
   * again at once rather than waiting for a wake-up. False when nothing was claimed.
   */
  readonly windowFull: boolean
}

/** One row of `outbox_claim_lanes`: a claimed lane, with one of its events or (when it has none) nulls. */
type ClaimRow = Omit<ClaimedLaneRow, 'events'> & {
  [K in Exclude<keyof LaneEventRow, keyof ClaimedLaneRow>]: LaneEventRow[K] | null
} & { window_full: boolean }

/**
 * Claims up to `lanes` free lanes whose head is due, under a fresh token and a lease in DATABASE time, and reads
 * each one's head and the rows behind it — one call of the schema's `outbox_claim_lanes` (migration 0004), whose
 * plans PostgreSQL keeps per connection.
 *
 * Shape of the claim, and the races it closes:
 * - Candidates come from the due index (`available_at <= now()` over pending rows), skipping rows of lanes under
 *   a live lease, so lanes waiting in backoff are never scanned and in-flight lanes cost one hash probe per row
 *   (the leased lanes are hashed once per claim, whatever the statistics say: migration 0006).
 * - The head (lowest pending sequence) is computed BEFORE any due filter: a lane whose head waits in backoff is
 *   not claimed even though a later row of it looks due. That is the ordering rule.
 * - `FOR UPDATE SKIP LOCKED` on the lane row: concurrent relays never wait for each other and never claim the same
 *   lane; READ COMMITTED re-checks the lease condition on the latest row version before locking it.
 * - Lanes parked by `onExhausted: 'block'` are never claimed, and their rows are skipped in the due scan too: a
 *   row enqueued while (or just before) the lane was blocked may still look due, and must not fill the window.
 * - The scan window is `scanRows` rows, not lanes: a small window keeps each claim cheap (at 128 lanes in flight
 *   a window of 64 rows per lane wanted made the claims themselves the bound), and `windowFull` tells the relay
 *   when a backlog whose rows come in long runs per aggregate may hold more due lanes past it.
 * - Cost proportional to the lanes wanted, not to the candidates: candidates stream in due order (the sorted
 *   subquery) into the lane and head checks, and the LIMIT stops them after `lanes` hits. No ORDER BY above the
 *   LIMIT on purpose: with one, PostgreSQL (which cannot estimate how many candidates pass the head check) ran
 *   the head check for EVERY candidate — up to `scanRows` of them, ~1,000 index probes per claim even for one
 *   lane — and sorted afterwards. Oldest-due-first is thus kept by the plan (candidates drive the join), not
 *   promised by SQL; it only decides which due lanes go first, never whether a lane may be claimed.
 * - The function commits asynchronously and with generic plans (see migration 0004 for why that is safe), so it
 *   must be called in a transaction of its own, as the relay does: both settings last until that commit.
 * - The rows are read by a second statement in the function: under READ COMMITTED it takes a fresh snapshot, so
 *   rows that the lane's previous owner marked sent just before our claim are not sent again, while the claimed
 *   lane rows stay locked by us until the call commits.
 */
export async function claimLanes(
  db: Kysely<any>,
  schema: string,
  lanes: number,
  leaseMs: number,
  scanRows: number,
  batchSize: number,
): Promise<ClaimResult> {
  const { rows } = await sql<ClaimRow>`
    SELECT * FROM ${sql.id(schema, 'outbox_claim_lanes')}(${lanes}, ${leaseMs}, ${scanRows}, ${batchSize})`.execute(
    db,
  )
  // Rows come lane by lane, each lane's in sequence order.
  const claimed: ClaimedLaneRow[] = []
  let lane: ClaimedLaneRow | undefined
  for (const row of rows) {
    if (lane?.claim_token !== row.claim_token) {
      lane = {
        aggregate_type: row.aggregate_type,
        aggregate_id: row.aggregate_id,
        claim_token: row.claim_token,
        taken_over: row.taken_over,
        conflict_count: row.conflict_count,
        events: [],
      }
      claimed.push(lane)
    }
    if (row.id === null) continue
    lane.events.push({
      id: row.id,
      claim_token: row.claim_token,
      event_id: row.event_id!,
      aggregate_type: row.aggregate_type,
      aggregate_id: row.aggregate_id,
      sequence: row.sequence!,
      event_type: row.event_type!,
      payload: row.payload!,
      created_at: row.created_at!,
      attempts: row.attempts!,
    })
  }
  return { lanes: claimed, windowFull: rows[0]?.window_full ?? false }
}
