import { sql } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { SqlContext } from './sql-context.js'

/** A disabled stored subscription that has been disabled longer than the disabled retention. */
export interface LapsedSubscriptionRow {
  id: string
  name: string | null
}

/**
 * The stored subscriptions disabled longer than `retentionMs` (database time): the only ones whose pending
 * deliveries the disabled retention may drop, since a row qualifies when `greatest(created_at, disabled_at)` is past
 * the retention. A subscription disabled more recently is left out here, before any of its rows is read, so a prune
 * costs nothing for a pause shorter than the retention.
 *
 * The implicit subscription is never listed: a relay given an `endpoint` serves it whatever its state, so what it
 * holds is not paused and must not be dropped.
 */
export async function selectLapsedSubscriptions(
  ctx: SqlContext,
  request: { readonly retentionMs: number },
): Promise<LapsedSubscriptionRow[]> {
  const { db, schema } = ctx
  return await db
    .withSchema(schema)
    .selectFrom('outbox_subscription')
    .select(['id', 'name'])
    .where('state', '=', 'disabled')
    .where('id', '<>', IMPLICIT_SUBSCRIPTION_ID)
    .where('disabled_at', '<', sql<Date>`now() - ${request.retentionMs} * interval '1 millisecond'`)
    .orderBy('id')
    .execute()
}
