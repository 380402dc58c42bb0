import { type Kysely, sql } from 'kysely'
import type { LaneEventRow } from './select-lane-events.js'

/** A lane this relay now owns, with its first rows. */
export interface ClaimedLaneRow {
  readonly aggregateType: string
  readonly aggregateId: string
  readonly claimToken: string
  /** The previous claim expired without releasing: its relay died or hung. */
  readonly takenOver: boolean
  /**
   * The expired claim had started a request on this watched lane and never recorded an outcome: the head is owed
   * one failed attempt.
   */
  readonly charged: boolean
  /** The lane is watched (a claim of it once expired): record the claim before the first request. */
  readonly watchStarts: boolean
  /** Consecutive 409 parks so far, for the growing park delay. */
  readonly conflictCount: number
  /** The head and rows behind it, in sequence order, within the byte budget; none if all were sent meanwhile. */
  readonly events: LaneEventRow[]
}

/** What one claim took. */
export interface ClaimResult {
  readonly lanes: ClaimedLaneRow[]
  /**
   * The due scan read all the rows it was allowed (`scanRows`): more due lanes may lie past its window, so claim
   * again at once rather than waiting for a wake-up. False when nothing was claimed.
   */
  readonly windowFull: boolean
  /** The byte budget left lanes out that were due and free: claim again only once lanes finish. */
  readonly budgetFull: boolean
}

/** What a claim asks for. */
export interface ClaimRequest {
  /** Most lanes to claim. */
  readonly lanes: number
  /** Lease of each claimed lane, in database time. */
  readonly leaseMs: number
  /** Rows the due scan may read (its window). */
  readonly scanRows: number
  /** Most rows read per lane. */
  readonly batchSize: number
  /** Most payload bytes returned in all; the first lane's head comes even when it alone is larger. */
  readonly maxBytes: number
}

/** One row of `outbox_claim_lanes`: a claimed lane, with one of its events or (when it has none) nulls. */
interface ClaimRow {
  aggregate_type: string
  aggregate_id: string
  claim_token: string
  taken_over: boolean
  charged: boolean
  watch_starts: boolean
  conflict_count: number
  id: string | null
  event_id: string | null
  sequence: string | null
  event_type: string | null
  payload: string | null
  payload_bytes: string | null
  created_at: Date | null
  attempts: number | null
  failing_ms: string | null
  window_full: boolean
  budget_full: boolean
}

/**
 * Claims up to `lanes` free lanes whose head is due, under a fresh token and a lease in DATABASE time, and reads
 * each one's head and the rows behind it — one call of the schema's `outbox_claim_lanes` (migration 0004; the body
 * in force, with the byte budget and the takeover charge, is 0007's), whose plans PostgreSQL keeps per connection.
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
 * - The scan window is `scanRows` rows, not lanes: a small window keeps each claim cheap, and `windowFull` tells
 *   the relay when a backlog whose rows come in long runs per aggregate may hold more due lanes past it.
 * - Cost proportional to the lanes wanted, not to the candidates: candidates stream in due order (the sorted
 *   subquery) into the lane and head checks, and the LIMIT stops them after `lanes` hits. No ORDER BY above the
 *   LIMIT on purpose: with one, PostgreSQL ran the head check for EVERY candidate and sorted afterwards.
 * - A byte budget (`maxBytes`): lanes are claimed only while their heads fit it, and the rows behind the heads are
 *   read heads-first within it (every lane's head, then every lane's second row, …), so what one claim returns is
 *   bounded in bytes, not only in rows, and is each lane's contiguous prefix. Sizes come from the stored
 *   `payload_bytes`; only returned rows are turned into text.
 * - A takeover (the previous claim expired) reports `charged` when that claim had recorded the start of a request
 *   on a watched lane (`started_token`), and watches the lane from then on (see the relay's takeover rule).
 * - The function commits asynchronously and with generic plans (see migration 0004 for why that is safe), so it
 *   must be called in a transaction of its own, as the relay does: both settings last until that commit.
 * - The rows are read by a second statement in the function: under READ COMMITTED it takes a fresh snapshot, so
 *   rows that the lane's previous owner marked sent just before our claim are not sent again, while the claimed
 *   lane rows stay locked by us until the call commits.
 */
export async function claimLanes(
  db: Kysely<any>,
  schema: string,
  request: ClaimRequest,
): Promise<ClaimResult> {
  const { lanes, leaseMs, scanRows, batchSize, maxBytes } = request
  // Raw SQL: a set-returning function call with positional arguments, which Kysely's builder has no form for.
  const { rows } = await sql<ClaimRow>`
    SELECT * FROM ${sql.id(schema, 'outbox_claim_lanes')}(
      ${lanes}::integer, ${leaseMs}::bigint, ${scanRows}::integer, ${batchSize}::integer, ${maxBytes}::bigint
    )`.execute(db)
  // Rows come lane by lane, each lane's in sequence order.
  const claimed: ClaimedLaneRow[] = []
  let lane: ClaimedLaneRow | undefined
  for (const row of rows) {
    if (lane?.claimToken !== row.claim_token) {
      lane = {
        aggregateType: row.aggregate_type,
        aggregateId: row.aggregate_id,
        claimToken: row.claim_token,
        takenOver: row.taken_over,
        charged: row.charged,
        watchStarts: row.watch_starts,
        conflictCount: row.conflict_count,
        events: [],
      }
      claimed.push(lane)
    }
    if (row.id === null) continue
    lane.events.push({
      id: row.id,
      eventId: row.event_id!,
      aggregateType: row.aggregate_type,
      aggregateId: row.aggregate_id,
      sequence: Number(row.sequence),
      eventType: row.event_type!,
      payload: row.payload!,
      payloadBytes: Number(row.payload_bytes),
      createdAt: row.created_at!,
      attempts: row.attempts!,
      failingMs: row.failing_ms === null ? null : Number(row.failing_ms),
    })
  }
  return {
    lanes: claimed,
    windowFull: rows[0]?.window_full ?? false,
    budgetFull: rows[0]?.budget_full ?? false,
  }
}
