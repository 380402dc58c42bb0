import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/** What {@link repairLane} did to one lane. */
export type LaneRepair =
  | { readonly outcome: 'repaired'; readonly actions: readonly string[] }
  | { readonly outcome: 'skipped'; readonly reason: string }

/** How long a repair waits for an enqueue or a claim of the lane before it gives up on the lane for this run. */
const REPAIR_LOCK_TIMEOUT = '5s'

/**
 * Which lane {@link repairLane} mends: a subscription's view of one aggregate, or with `subscriptionId` null the
 * aggregate as a whole (its sequence counter, which every subscription's lane of it shares).
 */
export interface RepairKey {
  readonly subscriptionId: string | null
  readonly aggregateType: string
  readonly aggregateId: string
}

/**
 * Repairs one lane in the caller's transaction (one per lane), taking it like a claim: the aggregate's counter row
 * (the enqueuers' lock, so no enqueue of the aggregate is open while rows are moved — the same order a redrive
 * takes them) and the lane row, and never while a live lease holds the lane (its owner might be mid-request; the
 * repair is skipped and says so). Every fix reads and writes only the lane's own subscription's rows: another
 * subscription's lane of the same aggregate is never looked at. Each fix re-checks its own condition under those
 * locks:
 *
 * - a lane of a subscription that no longer exists loses its rows and its lane row (nothing can deliver them);
 * - a missing lane row is created;
 * - a lane blocked as exhausted with no dead letter left (pruned) is unblocked, as if that dead letter had been
 *   skipped;
 * - a 409 park with nothing pending, or whose head was last answered otherwise, is cleared;
 * - in a lane not blocked, rows held at `'infinity'` become due now;
 * - a head at `'infinity'` in a lane blocked with no dead letter below it becomes due (the block still holds it);
 *
 * With no subscription, the one fix is the aggregate's: a counter missing or below an existing sequence (of any
 * subscription) is raised to the highest one.
 */
export async function repairLane(ctx: TransactionContext, key: RepairKey): Promise<LaneRepair> {
  const { db: trx, schema } = ctx
  // Raw SQL throughout: a savepoint, lock timeouts, row locks and fixes whose conditions span three tables.
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const counter = sql.id(schema, 'outbox_counter')
  const subscription = sql.id(schema, 'outbox_subscription')
  const aggregate = (alias: string) =>
    sql`${sql.id(alias)}.aggregate_type = ${key.aggregateType} AND ${sql.id(alias)}.aggregate_id = ${key.aggregateId}`
  const where = (alias: string) =>
    sql`${sql.id(alias)}.subscription_id = ${key.subscriptionId}::uuid AND ${aggregate(alias)}`
  const actions: string[] = []
  // The locks are taken under a savepoint: a lock timeout aborts only what follows it, so the transaction still
  // commits (with nothing done) and the caller goes on to the next lane.
  await sql`SAVEPOINT repair_locks`.execute(trx)
  try {
    await sql`SELECT set_config('lock_timeout', ${REPAIR_LOCK_TIMEOUT}, true)`.execute(trx)
    await sql`SELECT 1 FROM ${counter} c WHERE ${aggregate('c')} FOR UPDATE`.execute(trx)
    if (key.subscriptionId === null) return await raiseCounter(ctx, key, actions)
    const { rows: lanes } = await sql<{ leased: boolean }>`
      SELECT (l.claim_token IS NOT NULL AND l.leased_until > now()) AS leased FROM ${lane} l WHERE ${where('l')}
      FOR UPDATE`.execute(trx)
    if (lanes[0]?.leased)
      return { outcome: 'skipped', reason: 'a relay holds it under a live lease; run again later' }
    const { rows: known } = await sql`
      SELECT 1 FROM ${subscription} s WHERE s.id = ${key.subscriptionId}::uuid`.execute(trx)
    if (known.length === 0) {
      const deleted = await sql`DELETE FROM ${outbox} o WHERE ${where('o')}`.execute(trx)
      await sql`DELETE FROM ${lane} l WHERE ${where('l')}`.execute(trx)
      actions.push(
        `deleted its ${Number(deleted.numAffectedRows ?? 0n)} event(s) and its lane: subscription ${key.subscriptionId} does not exist`,
      )
      return { outcome: 'repaired', actions }
    }
    if (lanes.length === 0) {
      await sql`INSERT INTO ${lane} (subscription_id, aggregate_type, aggregate_id)
        VALUES (${key.subscriptionId}::uuid, ${key.aggregateType}, ${key.aggregateId})
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
  return { outcome: 'repaired', actions }
}

/**
 * Raises the aggregate's counter to its highest sequence in any subscription (the sequence is the aggregate's,
 * shared by every subscription's lane), under the counter lock {@link repairLane} took.
 */
async function raiseCounter(ctx: TransactionContext, key: RepairKey, actions: string[]): Promise<LaneRepair> {
  const { db: trx, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const counter = sql.id(schema, 'outbox_counter')
  const { rows: raised } = await sql<{ last_sequence: string }>`
    INSERT INTO ${counter} AS c (aggregate_type, aggregate_id, last_sequence)
    SELECT ${key.aggregateType}, ${key.aggregateId}, max(o.sequence) FROM ${outbox} o
    WHERE o.aggregate_type = ${key.aggregateType} AND o.aggregate_id = ${key.aggregateId}
    HAVING max(o.sequence) IS NOT NULL
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = excluded.last_sequence
      WHERE c.last_sequence < excluded.last_sequence
    RETURNING c.last_sequence`.execute(trx)
  if (raised[0]) actions.push(`raised its sequence counter to ${raised[0].last_sequence}`)
  return { outcome: 'repaired', actions }
}
