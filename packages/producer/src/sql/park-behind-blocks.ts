import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** How many blocked lanes one sweep settles; the rest wait for the next one. */
const LANES_PER_SWEEP = 100

/**
 * Parks at `'infinity'` the pending rows that arrived behind a lane's blocker after the lane was blocked; returns
 * how many rows it parked.
 *
 * Why they exist: an enqueue reads its lane without a lock (so an enqueue never waits on a relay), and
 * {@link deadLetterHead} cannot see rows of a transaction still open. An enqueue that read the lane before the block
 * and committed after it leaves its row due in a blocked lane. No claim takes it (the claim skips blocked lanes), so
 * order and delivery are safe, but the row sits in every claim's scan of the due index until a redrive. Relays run
 * this sweep now and then, so the rows end where the block put the others.
 *
 * Only rows above the lane's highest dead sequence (its blocker) are parked: an older dead letter redriven alone
 * waits, due, below the blocker, as the redrive left it. Each lane is locked like a claim locks it (`SKIP LOCKED`:
 * a lane a redrive or a repair holds is left for the next sweep), and its `blocked_reason` is re-read under that
 * lock, so a lane a redrive resumed is never parked again.
 */
export async function parkBehindBlocks(
  ctx: SqlContext,
  request: { readonly subscriptions: readonly string[] },
): Promise<number> {
  const { db, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const behindBlocker = (alias: string, laneAlias: string) => sql`
    ${sql.id(alias)}.subscription_id = ${sql.id(laneAlias)}.subscription_id
    AND ${sql.id(alias)}.aggregate_type = ${sql.id(laneAlias)}.aggregate_type
    AND ${sql.id(alias)}.aggregate_id = ${sql.id(laneAlias)}.aggregate_id
    AND ${sql.id(alias)}.status = 'pending' AND ${sql.id(alias)}.available_at < 'infinity'
    AND ${sql.id(alias)}.sequence > (
      SELECT max(d.sequence) FROM ${outbox} d
      WHERE d.subscription_id = ${sql.id(laneAlias)}.subscription_id
        AND d.aggregate_type = ${sql.id(laneAlias)}.aggregate_type
        AND d.aggregate_id = ${sql.id(laneAlias)}.aggregate_id AND d.status = 'dead')`
  // Raw SQL: a locking CTE (FOR UPDATE SKIP LOCKED) feeding an UPDATE … FROM.
  const result = await sql`
    WITH settling AS (
      SELECT l.subscription_id, l.aggregate_type, l.aggregate_id FROM ${lane} l
      WHERE l.blocked_reason = 'exhausted' AND l.subscription_id = ANY(${request.subscriptions}::uuid[])
        AND EXISTS (SELECT 1 FROM ${outbox} o WHERE ${behindBlocker('o', 'l')})
      LIMIT ${LANES_PER_SWEEP}
      FOR UPDATE OF l SKIP LOCKED
    )
    UPDATE ${outbox} o SET available_at = 'infinity'
    FROM settling l
    WHERE ${behindBlocker('o', 'l')}`.execute(db)
  return Number(result.numAffectedRows ?? 0n)
}
