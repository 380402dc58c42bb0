import { sql } from 'kysely'
import type { LaneEvent } from './claimed-lane.js'
import type { SqlContext } from './sql-context.js'

/** What reading a lane's next rows asks for. */
export interface NextRowsRequest {
  readonly claimToken: string
  /** The last sequence already read: rows after it come back. */
  readonly afterSequence: number
  readonly batchSize: number
  /** Most payload bytes returned; the first row comes even when it alone is larger. */
  readonly maxBytes: number
}

/** One row as PostgreSQL returns it, mapped here and nowhere else. */
interface LaneEventRow {
  id: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: string
  event_type: string
  payload: string
  bytes: string
  created_at: Date
  attempts: number
  failing_ms: string | null
}

/**
 * Reads the next rows of a lane its owner goes on delivering past a full batch: up to `batchSize` pending rows
 * after `afterSequence`, in sequence order (contiguous, since sequence order is delivery order), within `maxBytes`
 * of payload. The claim reads a lane's first rows itself (`claimLanes`).
 *
 * Fenced by the claim token, so a lane lost in between yields nothing. A lane of a rate-limited subscription yields
 * nothing either: its claim spent one token for one request (migration 0012), so it goes back for another claim
 * rather than read on (a relay whose `batchSize` is 1 would otherwise send its whole backlog past the rate). Sizes come from the stored `payload_bytes`
 * (measured for rows written before migration 0007), so rows past the budget are never turned into text; the
 * payload is read as text, which the relay splices into the body without a parse/serialise round trip.
 */
export async function selectLaneEvents(ctx: SqlContext, request: NextRowsRequest): Promise<LaneEvent[]> {
  const outbox = sql.id(ctx.schema, 'outbox')
  const lane = sql.id(ctx.schema, 'outbox_lane')
  // Raw SQL: window functions over a lateral read, which Kysely's builder cannot express readably.
  const { rows } = await sql<LaneEventRow>`
    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.event_type, o.payload::text AS payload,
           k.bytes, o.created_at, o.attempts,
           (extract(epoch FROM now() - o.first_failed_at) * 1000)::bigint AS failing_ms
    FROM (
      SELECT e.id, e.bytes, sum(e.bytes) OVER w AS running, row_number() OVER w AS pos
      FROM ${lane} l
      CROSS JOIN LATERAL (
        SELECT o.id, o.sequence, coalesce(o.payload_bytes, octet_length(o.payload::text))::bigint AS bytes
        FROM ${outbox} o
        WHERE o.subscription_id = l.subscription_id AND o.aggregate_type = l.aggregate_type
          AND o.aggregate_id = l.aggregate_id AND o.status = 'pending'
          AND o.sequence > ${request.afterSequence}::bigint
        ORDER BY o.sequence
        LIMIT ${request.batchSize}
      ) e
      WHERE l.claim_token = ${request.claimToken}::uuid
        AND NOT EXISTS (
          SELECT 1 FROM ${sql.id(ctx.schema, 'outbox_subscription')} rated
          WHERE rated.id = l.subscription_id AND rated.rate_per_second IS NOT NULL
        )
      WINDOW w AS (ORDER BY e.sequence ROWS UNBOUNDED PRECEDING)
    ) k
    JOIN ${outbox} o ON o.id = k.id
    WHERE k.running <= ${request.maxBytes}::bigint OR k.pos = 1
    ORDER BY o.sequence`.execute(ctx.db)
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    eventType: row.event_type,
    payload: row.payload,
    payloadBytes: Number(row.bytes),
    createdAt: row.created_at,
    attempts: row.attempts,
    failingMs: row.failing_ms === null ? null : Number(row.failing_ms),
  }))
}
