import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/** What {@link repairLane} did to one lane. */
export type LaneRepair =
  | { readonly outcome: 'repaired'; readonly actions: readonly string[] }
  | { readonly outcome: 'skipped'; readonly reason: string }

/** How long a repair waits for an enqueue or a claim of the lane before it gives up on the lane for this run. */
const REPAIR_LOCK_TIMEOUT = '5s'

/**
 * Repairs one aggregate's lane in the caller's transaction (one per lane), taking it like a claim: the counter row
 * (the enqueuers' lock, so no enqueue of the aggregate is open while rows are moved — the same order a redrive
 * takes them) and the lane row, and never while a live lease holds the lane (its owner might be mid-request; the
 * repair is skipped and says so). Each fix re-checks its own condition under those locks:
 *
 * - a missing lane row is created;
 * - a lane blocked as exhausted with no dead letter left (pruned) is unblocked, as if that dead letter had been
 *   skipped;
 * - a 409 park with nothing pending, or whose head was last answered otherwise, is cleared;
 * - in a lane not blocked, rows held at `'infinity'` become due now;
 * - a head at `'infinity'` in a lane blocked with no dead letter below it becomes due (the block still holds it);
 * - a counter missing or below an existing sequence is raised to the highest one.
 */
export async function repairLane(
  ctx: TransactionContext,
  key: { readonly aggregateType: string; readonly aggregateId: string },
): Promise<LaneRepair> {
  const { db: trx, schema } = ctx
  // Raw SQL throughout: a savepoint, lock timeouts, row locks and fixes whose conditions span three tables.
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const counter = sql.id(schema, 'outbox_counter')
  const where = (alias: string) =>
    sql`${sql.id(alias)}.aggregate_type = ${key.aggregateType} AND ${sql.id(alias)}.aggregate_id = ${key.aggregateId}`
  const actions: string[] = []
  // The locks are taken under a savepoint: a lock timeout aborts only what follows it, so the transaction still
  // commits (with nothing done) and the caller goes on to the next lane.
  await sql`SAVEPOINT repair_locks`.execute(trx)
  try {
    await sql`SELECT set_config('lock_timeout', ${REPAIR_LOCK_TIMEOUT}, true)`.execute(trx)
    await sql`SELECT 1 FROM ${counter} c WHERE ${where('c')} FOR UPDATE`.execute(trx)
    const { rows: lanes } = await sql<{ leased: boolean }>`
      SELECT (l.claim_token IS NOT NULL AND l.leased_until > now()) AS leased FROM ${lane} l WHERE ${where('l')}
      FOR UPDATE`.execute(trx)
    if (lanes[0]?.leased)
      return { outcome: 'skipped', reason: 'a relay holds it under a live lease; run again later' }
    if (lanes.length === 0) {
      await sql`INSERT INTO ${lane} (aggregate_type, aggregate_id) VALUES (${key.aggregateType}, ${key.aggregateId})
        ON CONFLICT DO NOTHING`.execute(trx)
      actions.push('created its missing lane row')
    }
  } catch (error) {
    if ((error as { code?: unknown }).code === '55P03') {
      await sql`ROLLBACK TO SAVEPOINT repair_locks`.execute(trx)
      return {
        outcome: 'skipped',
        reason: 'an enqueue or a claim held it for more than 5 s; run again later',
      }
    }
    throw error
  }

  const unblocked = await sql`
    UPDATE ${lane} l SET blocked_reason = NULL, blocked_at = NULL
    WHERE ${where('l')} AND l.blocked_reason = 'exhausted'
      AND NOT EXISTS (SELECT 1 FROM ${outbox} d WHERE ${where('d')} AND d.status = 'dead')`.execute(trx)
  if (Number(unblocked.numAffectedRows ?? 0n) > 0) {
    actions.push('unblocked it: the dead letter that blocked it is gone (as if it had been skipped)')
  }
  const unparked = await sql`
    UPDATE ${lane} l SET blocked_reason = NULL, blocked_at = NULL, conflict_count = 0
    WHERE ${where('l')} AND l.blocked_reason = 'conflict'
      AND (SELECT h.last_status FROM ${outbox} h WHERE ${where('h')} AND h.status = 'pending'
           ORDER BY h.sequence LIMIT 1) IS DISTINCT FROM 409`.execute(trx)
  if (Number(unparked.numAffectedRows ?? 0n) > 0) actions.push('cleared a 409 park its head no longer has')
  const released = await sql`
    UPDATE ${outbox} o SET available_at = now()
    WHERE ${where('o')} AND o.status = 'pending' AND o.available_at = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM ${lane} l WHERE ${where('l')} AND l.blocked_reason = 'exhausted')`.execute(
    trx,
  )
  const releasedRows = Number(released.numAffectedRows ?? 0n)
  if (releasedRows > 0) actions.push(`made ${releasedRows} event(s) held at infinity due now`)
  const headDue = await sql`
    UPDATE ${outbox} o SET available_at = now()
    WHERE o.id = (SELECT h.id FROM ${outbox} h WHERE ${where('h')} AND h.status = 'pending'
                  ORDER BY h.sequence LIMIT 1)
      AND o.available_at = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM ${outbox} d WHERE ${where('d')} AND d.status = 'dead' AND d.sequence < o.sequence)`.execute(
    trx,
  )
  if (Number(headDue.numAffectedRows ?? 0n) > 0)
    actions.push('gave its head a due time (its lane stays blocked)')
  const { rows: raised } = await sql<{ last_sequence: string }>`
    INSERT INTO ${counter} AS c (aggregate_type, aggregate_id, last_sequence)
    SELECT ${key.aggregateType}, ${key.aggregateId}, max(o.sequence) FROM ${outbox} o WHERE ${where('o')}
    HAVING max(o.sequence) IS NOT NULL
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = excluded.last_sequence
      WHERE c.last_sequence < excluded.last_sequence
    RETURNING c.last_sequence`.execute(trx)
  if (raised[0]) actions.push(`raised its sequence counter to ${raised[0].last_sequence}`)
  return { outcome: 'repaired', actions }
}
