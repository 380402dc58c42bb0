import { type Kysely, sql } from 'kysely'

/** A 2xx answer waiting to be recorded. */
export interface SentMark {
  readonly id: string
  readonly claimToken: string
  readonly httpStatus: number
  readonly deliveryStatus: string | null
  readonly attemptedAt: Date
}

/** A lane to hand back: its claim ends, and a 409 park ends too if any of its events went through. */
export interface LaneRelease {
  readonly claimToken: string
  readonly delivered: boolean
}

/**
 * Records a batch of 2xx answers and releases finished lanes in ONE statement (one transaction).
 *
 * Why together: a lane is released only in the same commit as its marks, so the next owner can never see it free
 * with delivered rows still pending (which would send them again). Why batched: one UPDATE over `unnest` arrays
 * replaces a transaction per event (≈ 5× the throughput). Every write is fenced by the claim token: a relay whose
 * lease was taken over can neither mark nor release the new owner's lane.
 */
export async function markSentAndRelease(
  db: Kysely<any>,
  schema: string,
  marks: readonly SentMark[],
  releases: readonly LaneRelease[],
): Promise<{ marked: number; released: number }> {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const { rows } = await sql<{ marked: string; released: string }>`
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
        AND o.aggregate_type = l.aggregate_type AND o.aggregate_id = l.aggregate_id
      RETURNING 1
    ), r AS (
      SELECT * FROM unnest(${releases.map((release) => release.claimToken)}::uuid[], ${releases.map((release) => release.delivered)}::boolean[])
        AS r(claim_token, delivered)
    ), released AS (
      UPDATE ${lane} l
      SET claim_token = NULL, leased_until = NULL,
          blocked_reason = CASE WHEN r.delivered AND l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_reason END,
          blocked_at = CASE WHEN r.delivered AND l.blocked_reason = 'conflict' THEN NULL ELSE l.blocked_at END,
          conflict_count = CASE WHEN r.delivered THEN 0 ELSE l.conflict_count END
      FROM r
      WHERE l.claim_token = r.claim_token
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM marked) AS marked, (SELECT count(*) FROM released) AS released`.execute(db)
  return { marked: Number(rows[0]?.marked ?? 0), released: Number(rows[0]?.released ?? 0) }
}
