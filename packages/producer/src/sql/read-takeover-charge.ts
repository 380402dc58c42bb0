import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** What a takeover that charges a lane's head needs to know about the claim that died. */
export interface TakeoverCharge {
  /** The dead claim started its request alone in its relay: the charge is a proven attempt. */
  readonly startedAlone: boolean
  /** Provisional charges the head already carries (see migration 0019). */
  readonly takeoverCharges: number
}

/**
 * Reads, for a lane a takeover charges, whether the expired claim had started its request alone and how many
 * provisional charges its head carries; undefined when the claim is no longer ours.
 *
 * Why a read of its own, not a column of the claim: charged takeovers are rare, and the claim functions' result is
 * kept as it is (their two forms are compared row for row), so no claim reads more for them.
 */
export async function readTakeoverCharge(
  ctx: SqlContext,
  request: { readonly claimToken: string; readonly headId: string },
): Promise<TakeoverCharge | undefined> {
  const { rows } = await sql<{ started_alone: boolean; takeover_charges: number | null }>`
    SELECT l.started_alone,
           (SELECT o.takeover_charges FROM ${sql.id(ctx.schema, 'outbox')} o WHERE o.id = ${request.headId}) AS takeover_charges
    FROM ${sql.id(ctx.schema, 'outbox_lane')} l
    WHERE l.claim_token = ${request.claimToken}`.execute(ctx.db)
  const row = rows[0]
  if (!row) return undefined
  return { startedAlone: row.started_alone, takeoverCharges: row.takeover_charges ?? 0 }
}
