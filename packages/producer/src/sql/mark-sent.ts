import { sql } from 'kysely'
import { type AttemptRecord, deliveredLogCte } from './delivery-attempt-log.js'
import { streakResetCte } from './endpoint-health.js'
import type { SqlContext } from './sql-context.js'

/** A 2xx answer waiting to be recorded. */
export interface SentMark {
  readonly id: string
  readonly claimToken: string
  readonly httpStatus: number
  readonly deliveryStatus: string | null
  readonly attemptedAt: Date
  /** A stored subscription's id: its 2xx ends the breaker's failure streak. Absent for the implicit subscription. */
  readonly subscriptionId?: string
  /** The attempt for the delivery log; absent when the relay does not log 2xx answers. */
  readonly attempt?: AttemptRecord
}

/** A lane to hand back: its claim ends, and a 409 park ends too if any of its events went through. */
export interface LaneRelease {
  readonly claimToken: string
  readonly delivered: boolean
}

/** What one {@link markSentAndRelease} wrote. */
export interface MarkSentResult {
  /** Rows marked sent (fenced marks excluded). */
  readonly marked: number
  /** Lanes released. */
  readonly released: number
  /** Released lanes that still hold pending rows: claimable now, so worth waking the claim loop for. */
  readonly releasedWithWork: number
}

/**
 * Records a batch of 2xx answers and releases finished lanes in ONE statement (one transaction).
 *
 * Why together: a lane is released only in the same commit as its marks, so the next owner can never see it free
 * with delivered rows still pending (which would send them again). Why batched: one UPDATE over `unnest` arrays
 * replaces a transaction per event (≈ 5× the throughput). Every write is fenced by the claim token: a relay whose
 * lease was taken over can neither mark nor release the new owner's lane.
 *
 * A 2xx of a stored subscription also ends its endpoint breaker's failure streak, and each logged 2xx becomes a
 * row of the delivery log, in the same statement: that bookkeeping is written per batch, never per request.
 *
 * It also counts the released lanes that still hold pending rows (events enqueued while the lane was leased, or
 * a hot lane's next batch), so the relay wakes its claim loop for those alone rather than after every release.
 * All parts of one statement read the same snapshot, so the rows this statement marks still look pending to that
 * count: they are excluded by id. The count cannot see rows committed after the statement began; the relay covers
 * those with the NOTIFY that their enqueue sent (see the relay's mark writer).
 *
 * That count is a LATERAL probe with `LIMIT 1` per released lane, on the pending-lane index, never a join: as an
 * `EXISTS`, PostgreSQL turned it into a hash semi-join over EVERY pending row of the outbox, so each flush cost
 * grew with the backlog of any subscription (a failing or slow endpoint's, a large backlog) — flushes of 1 to 10 s
 * at 10,000 pending rows, while every released lane, of every subscription, stayed leased until its flush landed.
 */
export async function markSentAndRelease(
  ctx: SqlContext,
  batch: { readonly marks: readonly SentMark[]; readonly releases: readonly LaneRelease[] },
): Promise<MarkSentResult> {
  const { db, schema } = ctx
  const { marks, releases } = batch
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const streaks = [
    ...new Set(marks.flatMap((mark) => (mark.subscriptionId === undefined ? [] : [mark.subscriptionId]))),
  ]
  const logged = marks.flatMap((mark) => (mark.attempt === undefined ? [] : [mark.attempt]))
  // Raw SQL: data-modifying CTEs over unnest arrays, which the builder cannot put in one statement.
  const { rows } = await sql<{ marked: string; released: string; released_with_work: string }>`
    WITH m AS (
      SELECT * FROM unnest(
        ${marks.map((mark) => mark.id)}::bigint[], ${marks.map((mark) => mark.claimToken)}::uuid[],
        ${marks.map((mark) => mark.httpStatus)}::int[], ${marks.map((mark) => mark.deliveryStatus)}::text[],
        ${marks.map((mark) => mark.attemptedAt.toISOString())}::timestamptz[]
      ) AS m(id, claim_token, http_status, delivery_status, attempted_at)
    ), marked AS (
      UPDATE ${outbox} o
      SET status = 'sent', sent_at = now(), attempts = o.attempts + 1, last_status = m.http_status,
          last_attempt_at = m.attempted_at, delivery_status = m.delivery_status, last_error = NULL
      FROM m JOIN ${lane} l ON l.claim_token = m.claim_token
      WHERE o.id = m.id AND o.status = 'pending'
        AND o.subscription_id = l.subscription_id AND o.aggregate_type = l.aggregate_type
        AND o.aggregate_id = l.aggregate_id
      RETURNING 1
    ), r AS (
      SELECT * FROM unnest(${releases.map((release) => release.claimToken)}::uuid[], ${releases.map((release) => release.delivered)}::boolean[])
        AS r(claim_token, delivered)
    ), released AS (
      UPDATE ${lane} l
      SET claim_token = NULL, leased_until = NULL,
          blocked_reason = CASE WHEN r.delivered AND l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
          blocked_at = CASE WHEN r.delivered AND l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END,
          conflict_count = CASE WHEN r.delivered THEN 0 ELSE l.conflict_count END,
          -- A delivery went through: whatever killed an earlier claim of this lane was not its head's request.
          watch_starts = CASE WHEN r.delivered THEN false ELSE l.watch_starts END
      FROM r
      WHERE l.claim_token = r.claim_token
      RETURNING l.subscription_id, l.aggregate_type, l.aggregate_id
    )${streakResetCte(schema, streaks)}${deliveredLogCte(schema, logged)}
    SELECT (SELECT count(*) FROM marked) AS marked, (SELECT count(*) FROM released) AS released,
      (SELECT count(*) FROM released rl CROSS JOIN LATERAL (
        SELECT 1 FROM ${outbox} o
        WHERE o.subscription_id = rl.subscription_id AND o.aggregate_type = rl.aggregate_type
          AND o.aggregate_id = rl.aggregate_id AND o.status = 'pending'
          AND o.id NOT IN (SELECT m.id FROM m)
        LIMIT 1
      ) pending) AS released_with_work`.execute(db)
  return {
    marked: Number(rows[0]?.marked ?? 0),
    released: Number(rows[0]?.released ?? 0),
    releasedWithWork: Number(rows[0]?.released_with_work ?? 0),
  }
}
