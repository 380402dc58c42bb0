import { type Kysely, sql } from 'kysely'

/** One event of a claimed lane, ready to send. */
export interface LaneEventRow {
  id: string
  claim_token: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: string
  event_type: string
  /** The payload as JSON text, spliced into the body unparsed. */
  payload: string
  created_at: Date
  attempts: number
}

/**
 * Reads the next rows of a lane its owner goes on delivering past a full batch: up to `batchSize` pending rows
 * after `afterSequence`, in sequence order (contiguous, since sequence order is delivery order). The claim reads a
 * lane's first rows itself (`claimLanes`).
 *
 * Fenced by the claim token, so a lane lost in between yields nothing. The payload is read as text: the relay
 * splices it into the body without a parse/serialise round trip.
 */
export async function selectLaneEvents(
  db: Kysely<any>,
  schema: string,
  tokens: readonly string[],
  batchSize: number,
  afterSequence: string,
): Promise<LaneEventRow[]> {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const { rows } = await sql<LaneEventRow>`
    SELECT e.id, l.claim_token, e.event_id, e.aggregate_type, e.aggregate_id, e.sequence, e.event_type,
           e.payload::text AS payload, e.created_at, e.attempts
    FROM ${lane} l
    CROSS JOIN LATERAL (
      SELECT * FROM ${outbox} o
      WHERE o.aggregate_type = l.aggregate_type AND o.aggregate_id = l.aggregate_id AND o.status = 'pending'
        AND o.sequence > ${afterSequence}::bigint
      ORDER BY o.sequence
      LIMIT ${batchSize}
    ) e
    WHERE l.claim_token = ANY(${tokens}::uuid[])
    ORDER BY l.aggregate_type, l.aggregate_id, e.sequence`.execute(db)
  return rows
}
