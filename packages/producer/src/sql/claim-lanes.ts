import { type Kysely, sql } from 'kysely'

/** A lane this relay now owns. */
export interface ClaimedLaneRow {
  aggregate_type: string
  aggregate_id: string
  claim_token: string
  /** The previous claim expired without releasing: its relay died or hung, maybe mid-request. */
  taken_over: boolean
  /** Consecutive 409 parks so far, for the growing park delay. */
  conflict_count: number
}

/**
 * Claims up to `lanes` free lanes whose head is due, under a fresh token and a lease in DATABASE time.
 *
 * Shape, and the races it closes:
 * - Candidates come from the due index (`available_at <= now()` over pending rows), skipping rows of lanes under
 *   a live lease, so lanes waiting in backoff are never scanned and in-flight lanes cost one probe per row.
 * - The head (lowest pending sequence) is computed BEFORE any due filter: a lane whose head waits in backoff is
 *   not claimed even though a later row of it looks due. That is the ordering rule.
 * - `FOR UPDATE SKIP LOCKED` on the lane row: concurrent relays never wait for each other and never claim the same
 *   lane; READ COMMITTED re-checks the lease condition on the latest row version before locking it.
 * - Lanes parked by `onExhausted: 'block'` are never claimed, and their rows are skipped in the due scan too: a
 *   row enqueued while (or just before) the lane was blocked may still look due, and must not fill the window.
 * - Cost proportional to the lanes wanted, not to the candidates: candidates stream in due order (the sorted
 *   subquery) into the lane and head checks, and the LIMIT stops them after `lanes` hits. No ORDER BY above the
 *   LIMIT on purpose: with one, PostgreSQL (which cannot estimate how many candidates pass the head check) ran
 *   the head check for EVERY candidate — up to `scanRows` of them, ~1,000 index probes per claim even for one
 *   lane — and sorted afterwards. Oldest-due-first is thus kept by the plan (candidates drive the join), not
 *   promised by SQL; it only decides which due lanes go first, never whether a lane may be claimed.
 */
export async function claimLanes(
  db: Kysely<any>,
  schema: string,
  lanes: number,
  leaseMs: number,
  scanRows: number,
): Promise<ClaimedLaneRow[]> {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const { rows } = await sql<ClaimedLaneRow>`
    WITH due AS (
      SELECT o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due
      FROM (
        SELECT aggregate_type, aggregate_id, available_at FROM ${outbox} o
        WHERE o.status = 'pending' AND o.available_at <= now()
          AND NOT EXISTS (
            SELECT 1 FROM ${lane} busy
            WHERE busy.aggregate_type = o.aggregate_type AND busy.aggregate_id = o.aggregate_id
              AND ((busy.claim_token IS NOT NULL AND busy.leased_until > now()) OR busy.blocked_reason = 'exhausted')
          )
        ORDER BY o.available_at
        LIMIT ${scanRows}
      ) o
      GROUP BY o.aggregate_type, o.aggregate_id
    ), picked AS (
      SELECT l.aggregate_type, l.aggregate_id, (l.claim_token IS NOT NULL) AS taken_over
      FROM (SELECT due.aggregate_type, due.aggregate_id FROM due ORDER BY due.first_due) d
      JOIN ${lane} l ON l.aggregate_type = d.aggregate_type AND l.aggregate_id = d.aggregate_id
      WHERE (l.claim_token IS NULL OR l.leased_until <= now())
        AND l.blocked_reason IS DISTINCT FROM 'exhausted'
        AND (
          SELECT head.available_at FROM ${outbox} head
          WHERE head.aggregate_type = l.aggregate_type AND head.aggregate_id = l.aggregate_id
            AND head.status = 'pending'
          ORDER BY head.sequence
          LIMIT 1
        ) <= now()
      LIMIT ${lanes}
      FOR UPDATE OF l SKIP LOCKED
    )
    UPDATE ${lane} l
    SET claim_token = gen_random_uuid(), leased_until = now() + ${leaseMs} * interval '1 millisecond'
    FROM picked
    WHERE l.aggregate_type = picked.aggregate_type AND l.aggregate_id = picked.aggregate_id
    RETURNING l.aggregate_type, l.aggregate_id, l.claim_token, picked.taken_over, l.conflict_count`.execute(
    db,
  )
  return rows
}
