import { sql } from 'kysely'
import { OutboxError } from '../errors.js'
import type { TransactionContext } from './sql-context.js'

/** A lane: one subscription's view of one aggregate. */
export interface LaneKey {
  readonly subscriptionId: string
  readonly aggregateType: string
  readonly aggregateId: string
}

/** The lane row as {@link lockLaneForAction} found it, under its lock. */
export interface LockedLane {
  readonly blockedReason: 'exhausted' | 'conflict' | null
  readonly leasedUntil: Date | null
}

/** How long an operator action waits for an enqueue or a claim of its lane before it gives up. */
const ACTION_LOCK_TIMEOUT = '5s'

/** Names a lane in messages: `order/42 of subscription <id>`. */
export function describeLane(key: LaneKey): string {
  return `${key.aggregateType}/${key.aggregateId} of subscription ${key.subscriptionId}`
}

/**
 * Takes a lane for an operator action, in the caller's transaction (which the action then commits), the way a
 * redrive and a repair take it: the aggregate's COUNTER row first (every enqueue of the aggregate holds it until it
 * commits, so none is open while the action moves rows, and the action's later statements see every row they
 * wrote), then the LANE row (a claim locks it too, so the action never interleaves with a claim). A lane under a
 * live lease is refused — its relay may be mid-request, and an action under it would race the relay's outcome —
 * with `ERR_OUTBOX_LANE_LEASED`; a lock held longer than 5 s fails with `ERR_OUTBOX_LANE_BUSY`; a lane that does
 * not exist fails with `ERR_OUTBOX_LANE_NOT_FOUND`.
 */
export async function lockLaneForAction(ctx: TransactionContext, key: LaneKey): Promise<LockedLane> {
  const { db: trx, schema } = ctx
  const counter = sql.id(schema, 'outbox_counter')
  const lane = sql.id(schema, 'outbox_lane')
  // Raw SQL: a transaction-local lock timeout and row locks in the fixed order.
  await sql`SELECT set_config('lock_timeout', ${ACTION_LOCK_TIMEOUT}, true)`.execute(trx)
  try {
    await sql`SELECT 1 FROM ${counter} c
      WHERE c.aggregate_type = ${key.aggregateType} AND c.aggregate_id = ${key.aggregateId} FOR UPDATE`.execute(
      trx,
    )
    const { rows } = await sql<{ blocked_reason: LockedLane['blockedReason']; leased_until: Date | null }>`
      SELECT l.blocked_reason, CASE WHEN l.claim_token IS NOT NULL AND l.leased_until > now() THEN l.leased_until END
               AS leased_until
      FROM ${lane} l
      WHERE l.subscription_id = ${key.subscriptionId}::uuid AND l.aggregate_type = ${key.aggregateType}
        AND l.aggregate_id = ${key.aggregateId}
      FOR UPDATE`.execute(trx)
    const found = rows[0]
    if (!found) throw new OutboxError('ERR_OUTBOX_LANE_NOT_FOUND', `no lane ${describeLane(key)}`)
    if (found.leased_until !== null) {
      throw new OutboxError(
        'ERR_OUTBOX_LANE_LEASED',
        `lane ${describeLane(key)} is held by a relay under a lease until ${found.leased_until.toISOString()} (it may be mid-request); try again after that`,
      )
    }
    await sql`SELECT set_config('lock_timeout', '0', true)`.execute(trx)
    return { blockedReason: found.blocked_reason, leasedUntil: null }
  } catch (error) {
    if ((error as { code?: unknown }).code === '55P03') {
      throw new OutboxError(
        'ERR_OUTBOX_LANE_BUSY',
        `lane ${describeLane(key)} was held by an enqueue, a claim or another action for more than 5 s; try again`,
        { cause: error },
      )
    }
    throw error
  }
}

/**
 * Resumes a lane blocked by an exhausted head as if that dead letter had been skipped, under the locks of
 * {@link lockLaneForAction}: the block is lifted and the rows it parked at `'infinity'` become due now, in order.
 * The dead letter itself stays dead (and redrivable). Returns how many rows became due.
 */
export async function releaseBlockedLane(ctx: TransactionContext, key: LaneKey): Promise<number> {
  const { db: trx, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  await sql`UPDATE ${lane} l SET blocked_reason = NULL, blocked_at = NULL
    WHERE l.subscription_id = ${key.subscriptionId}::uuid AND l.aggregate_type = ${key.aggregateType}
      AND l.aggregate_id = ${key.aggregateId} AND l.blocked_reason = 'exhausted'`.execute(trx)
  const released = await sql`UPDATE ${outbox} o SET available_at = now()
    WHERE o.subscription_id = ${key.subscriptionId}::uuid AND o.aggregate_type = ${key.aggregateType}
      AND o.aggregate_id = ${key.aggregateId} AND o.status = 'pending' AND o.available_at = 'infinity'`.execute(
    trx,
  )
  return Number(released.numAffectedRows ?? 0n)
}
