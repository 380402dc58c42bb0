// outbox_claim_subscription_lanes — body in force: migration 0012 (0009's endpoint-health claim with a rate per
// subscription); outbox_claim_single_subscription_lanes — migration 0017 (the same claim for one subscription).
import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { Clock } from '../runtime.js'
import { withCurrentSchema } from '../schema-outdated.js'
import type { ClaimedLane, LaneEvent } from './claimed-lane.js'
import type { SqlContext } from './sql-context.js'

/** What one claim took. */
export interface ClaimResult {
  readonly lanes: ClaimedLane[]
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
  /**
   * The subscriptions to claim for, each with its room: the most lanes it may get from this claim (the database
   * lowers it further to what the subscription's `maxInFlight` leaves across relays, and to its whole rate tokens).
   * @defaultValue the implicit subscription alone, with room for `lanes`
   */
  readonly subscriptions?: readonly { readonly id: string; readonly room: number }[]
  /** Most lanes to claim in all. */
  readonly lanes: number
  /** Lease of each claimed lane, in database time. */
  readonly leaseMs: number
  /** Rows the due scan may read (its window). */
  readonly scanRows: number
  /** Most rows read per lane. */
  readonly batchSize: number
  /** Most payload bytes returned in all; the first lane's head comes even when it alone is larger. */
  readonly maxBytes: number
  /** The relay's clock, read around the call for each lane's `claimedAt`, `readAt` and `deadline`. */
  readonly clock: Clock
}

/** One row of either claim function: a claimed lane, with one of its events or (when it has none) nulls. */
interface ClaimRow {
  subscription_id: string
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
  probe: boolean
}

/** A lane while its rows are read in: its events and bytes still grow. */
type LaneInProgress = Omit<ClaimedLane, 'events' | 'heldBytes'> & { events: LaneEvent[]; heldBytes: number }

/**
 * Claims up to `lanes` free lanes whose head is due, under a fresh token and a lease in DATABASE time, and reads
 * each one's head and the rows behind it — one call of the schema's `outbox_claim_subscription_lanes` (or, for one
 * subscription, `outbox_claim_single_subscription_lanes`: the same claim through a smaller plan), whose plans PostgreSQL
 * keeps per connection. Each lane comes back mapped, once, into the {@link ClaimedLane} the relay keeps: its
 * events, the bytes they hold and the relay-clock times around the call (`clock.now()` before it is sent and after
 * it returns).
 *
 * Shape of the claim, and the races it closes:
 * - Each served subscription's due rows are scanned on their own, and lanes are taken in turns across
 *   subscriptions, each up to its room: a backlogged subscription cannot fill the window another one needs.
 * - Candidates come from the due index (`available_at <= now()` over pending rows), skipping rows of lanes under
 *   a live lease, so lanes waiting in backoff are never scanned and in-flight lanes cost one hash probe per row
 *   (the leased lanes are hashed once per claim, whatever the statistics say: migration 0006).
 * - The head (lowest pending sequence) is computed BEFORE any due filter: a lane whose head waits in backoff is
 *   not claimed even though a later row of it looks due. That is the ordering rule.
 * - `FOR UPDATE SKIP LOCKED` on the lane row: concurrent relays never wait for each other and never claim the same
 *   lane; READ COMMITTED re-checks the lease condition on the latest row version before locking it.
 * - Lanes parked by `onExhausted: 'block'` are never claimed, and their rows are skipped in the due scan too: a
 *   row enqueued while (or just before) the lane was blocked may still look due, and must not fill the window.
 * - A rate-limited subscription (`ratePerSecond`) gets at most the whole tokens of its bucket, kept on its row and
 *   spent under the row lock the claim takes anyway, exactly one per lane claimed; each of its lanes is read with
 *   ONE event, so requests never outnumber tokens, whichever relays claim. With no whole token it gets room 0 and
 *   is not scanned, and its window filling up is not reported (`windowFull`): no claim again for tokens not there.
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
 *
 * A schema migrated by an older version has no such function: that is thrown as `ERR_OUTBOX_SCHEMA_OUTDATED`.
 */
export async function claimLanes(ctx: SqlContext, request: ClaimRequest): Promise<ClaimResult> {
  const { db, schema } = ctx
  const { lanes, leaseMs, scanRows, batchSize, maxBytes, clock } = request
  const subscriptions = request.subscriptions ?? [{ id: IMPLICIT_SUBSCRIPTION_ID, room: lanes }]
  if (subscriptions.length === 0) return { lanes: [], windowFull: false, budgetFull: false }
  // Taken before the claim is sent: the local deadline can only be earlier than the database's.
  const claimedAt = clock.now()
  const deadline = claimedAt + leaseMs
  // Raw SQL: a set-returning function call with positional arguments, which Kysely's builder has no form for. One
  // subscription is claimed through migration 0017's leaner function (same rows, a smaller plan to start per call),
  // which hands a limited one (maxInFlight, rate, open breaker) to the general claim itself.
  const single = subscriptions.length === 1 ? subscriptions[0]! : undefined
  const { rows } = await withCurrentSchema(schema, () =>
    single
      ? sql<ClaimRow>`
      SELECT * FROM ${sql.id(schema, 'outbox_claim_single_subscription_lanes')}(
        ${single.id}::uuid, ${single.room}::integer, ${lanes}::integer, ${leaseMs}::bigint, ${scanRows}::integer, ${batchSize}::integer, ${maxBytes}::bigint
      )`.execute(db)
      : sql<ClaimRow>`
      SELECT * FROM ${sql.id(schema, 'outbox_claim_subscription_lanes')}(
        ${subscriptions.map((s) => s.id)}::uuid[], ${subscriptions.map((s) => s.room)}::integer[], ${lanes}::integer, ${leaseMs}::bigint, ${scanRows}::integer, ${batchSize}::integer, ${maxBytes}::bigint
      )`.execute(db),
  )
  const readAt = clock.now()
  // Rows come lane by lane, each lane's in sequence order.
  const claimed: LaneInProgress[] = []
  let lane: LaneInProgress | undefined
  for (const row of rows) {
    if (lane?.claimToken !== row.claim_token) {
      lane = {
        subscriptionId: row.subscription_id,
        aggregateType: row.aggregate_type,
        aggregateId: row.aggregate_id,
        claimToken: row.claim_token,
        takenOver: row.taken_over,
        charged: row.charged,
        watchStarts: row.watch_starts,
        conflictCount: row.conflict_count,
        probe: row.probe,
        events: [],
        claimedAt,
        readAt,
        deadline,
        heldBytes: 0,
      }
      claimed.push(lane)
    }
    if (row.id === null) continue
    const payloadBytes = Number(row.payload_bytes)
    lane.heldBytes += payloadBytes
    lane.events.push({
      id: row.id,
      eventId: row.event_id!,
      aggregateType: row.aggregate_type,
      aggregateId: row.aggregate_id,
      sequence: Number(row.sequence),
      eventType: row.event_type!,
      payload: row.payload!,
      payloadBytes,
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
