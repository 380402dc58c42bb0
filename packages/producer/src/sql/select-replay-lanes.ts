import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** An aggregate, as a replay batch names it (one subscription's lane of it). */
export interface AggregateKey {
  readonly aggregate_type: string
  readonly aggregate_id: string
}

/**
 * The next `limit` aggregates, after `after` in index order, that hold sent rows of one subscription created in
 * [`since`, `until`): the lanes a replay batch works on.
 *
 * Keyset pagination in the order of `outbox_delivery_sequence_idx` (subscription, aggregate type, aggregate id,
 * sequence) and its default collation, so each page walks that index from where the last one stopped and the
 * planner stops after `limit` distinct aggregates; no OFFSET, which would rescan every earlier page. The byte order
 * the locks need (`COLLATE "C"`) is applied to the page later, by {@link replaySent}: ordering the page by it here
 * would lose the index order. No row is locked: the page is only a list of candidates, re-read under the locks.
 */
export async function selectReplayLanes(
  ctx: SqlContext,
  request: {
    readonly subscriptionId: string
    readonly since: Date
    readonly until: Date
    readonly after: AggregateKey | undefined
    readonly limit: number
  },
): Promise<AggregateKey[]> {
  const { db, schema } = ctx
  const { after } = request
  let query = db
    .withSchema(schema)
    .selectFrom('outbox')
    .select(['aggregate_type', 'aggregate_id'])
    .distinct()
    .where(sql<boolean>`subscription_id = ${request.subscriptionId}::uuid`)
    .where('status', '=', sql.lit('sent'))
    .where('created_at', '>=', request.since)
    .where('created_at', '<', request.until)
  if (after !== undefined) {
    // A row comparison, which the builder has no form for: it matches the index order in one range condition.
    query = query.where(
      sql<boolean>`(aggregate_type, aggregate_id) > (${after.aggregate_type}, ${after.aggregate_id})`,
    )
  }
  return await query.orderBy('aggregate_type').orderBy('aggregate_id').limit(request.limit).execute()
}
