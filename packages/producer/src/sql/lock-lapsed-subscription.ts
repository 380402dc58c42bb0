import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/**
 * Locks one subscription for a drop batch, in the caller's transaction, if it is STILL disabled past the retention:
 * `FOR NO KEY UPDATE`, the lock `enableSubscription`'s UPDATE takes too. So an enable that is in flight makes the
 * batch wait and then read the subscription enabled (READ COMMITTED re-checks the row after the wait): it drops
 * nothing, the enable wins. An enable that comes later waits for the batch to commit, and the lanes it resumes hold
 * a contiguous tail. Two prunes running at once take turns per subscription, so the counter they both add to is
 * never a deadlock. It is the batch's first lock and the only one it waits for (counters and lanes are taken with
 * SKIP LOCKED after it), so the batch never holds a lock while it waits.
 */
export async function lockLapsedSubscription(
  ctx: TransactionContext,
  request: { readonly id: string; readonly retentionMs: number },
): Promise<boolean> {
  const { db, schema } = ctx
  const found = await db
    .withSchema(schema)
    .selectFrom('outbox_subscription')
    .select('id')
    .where('id', '=', request.id)
    .where('state', '=', 'disabled')
    .where('disabled_at', '<', sql<Date>`now() - ${request.retentionMs} * interval '1 millisecond'`)
    .forNoKeyUpdate()
    .executeTakeFirst()
  return found !== undefined
}
