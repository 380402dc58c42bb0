import { type Kysely, sql } from 'kysely'

/**
 * Counts one attempt on the heads of lanes taken over from an expired claim, and returns their new attempt counts.
 *
 * Why: the previous owner died or hung with no outcome recorded, most likely mid-request on the head. Without
 * this count an event that kills its relay every time would retry forever and freeze its lane; with it, such an
 * event is dead-lettered after `maxAttempts` takeovers. Fenced by the new claim token.
 */
export async function countTakeoverAttempts(
  db: Kysely<any>,
  schema: string,
  heads: readonly { claimToken: string; id: string }[],
): Promise<Map<string, number>> {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const { rows } = await sql<{ id: string; attempts: number }>`
    UPDATE ${outbox} o
    SET attempts = o.attempts + 1, last_attempt_at = now(),
        last_error = 'the previous claim expired without an outcome (relay crashed or hung mid-lane)'
    FROM unnest(${heads.map((head) => head.id)}::bigint[], ${heads.map((head) => head.claimToken)}::uuid[]) AS h(id, claim_token)
    JOIN ${lane} l ON l.claim_token = h.claim_token
    WHERE o.id = h.id AND o.status = 'pending'
      AND o.aggregate_type = l.aggregate_type AND o.aggregate_id = l.aggregate_id
    RETURNING o.id, o.attempts`.execute(db)
  return new Map(rows.map((row) => [String(row.id), row.attempts]))
}
