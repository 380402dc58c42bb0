import { sql } from 'kysely'
import type { ResolvedDeadLetterFilter } from '../dead-letter-filter.js'
import { deadLetterWhere, isBlockerSql } from './dead-letter-where.js'
import type { SqlContext } from './sql-context.js'

/** A dead-letter row as stored. */
export interface DeadLetterRow {
  id: string
  event_id: string
  subscription_id: string
  /** Null when the subscription is stored without a name, or was deleted while its dead letters were left. */
  subscription_name: string | null
  tenant: string | null
  aggregate_type: string
  aggregate_id: string
  sequence: string
  event_type: string
  attempts: number
  last_status: number | null
  last_error: string | null
  last_attempt_at: Date | null
  created_at: Date
  dead_at: Date
  /** Whether it is its lane's blocker (see `isBlockerSql`). */
  blocks_lane: boolean
  /** `dead_at` in UTC to the microsecond, for the page cursor. */
  dead_at_cursor: string
}

/**
 * Lists dead letters oldest first, keyset-paginated on `(dead_at, id)` so pages stay stable while new dead letters
 * arrive; served by the partial index on `dead_at`. `id` is the row's, and a row is one event's delivery to one
 * subscription: an event dead in two subscriptions is two rows with two ids, so the cursor never skips or repeats
 * either. The filter's terms (`deadLetterWhere`) only narrow what the partial index yields, so a page reads at most
what it skips and returns; `blocks_lane` reads the lane row (its primary key) and the lane's dead rows (again the
partial index) only for the rows of the page.
 *
 * Why the cursor carries `dead_at` as microsecond text: a JavaScript Date keeps milliseconds, so a cursor built
 * from it sorts BEFORE the row it came from and the next page would repeat that row forever.
 */
export async function selectDeadLetters(
  ctx: SqlContext,
  page: {
    readonly limit: number
    readonly after?: { readonly deadAt: string; readonly id: string } | undefined
    readonly filter: ResolvedDeadLetterFilter
  },
): Promise<DeadLetterRow[]> {
  const { limit, after, filter } = page
  let query = ctx.db
    .withSchema(ctx.schema)
    .selectFrom('outbox as o')
    // A LEFT join: dead letters of a deleted subscription are still listed (and redrivable), without a name.
    .leftJoin('outbox_subscription as s', 's.id', 'o.subscription_id')
    .leftJoin('outbox_lane as l', (join) =>
      join
        .onRef('l.subscription_id', '=', 'o.subscription_id')
        .onRef('l.aggregate_type', '=', 'o.aggregate_type')
        .onRef('l.aggregate_id', '=', 'o.aggregate_id'),
    )
    .select([
      'o.id',
      'o.event_id',
      'o.subscription_id',
      's.name as subscription_name',
      'o.tenant',
      'o.aggregate_type',
      'o.aggregate_id',
      'o.sequence',
      'o.event_type',
      'o.attempts',
      'o.last_status',
      'o.last_error',
      'o.last_attempt_at',
      'o.created_at',
      'o.dead_at',
      isBlockerSql(ctx.schema).as('blocks_lane'),
      sql<string>`to_char(o.dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as(
        'dead_at_cursor',
      ),
    ])
    // A literal, as the partial index on dead rows is written: its predicate is then provable in any plan.
    .where('o.status', '=', sql.lit('dead'))
    .where(deadLetterWhere(ctx.schema, filter))
  if (after) {
    query = query.where((eb) =>
      eb(
        eb.refTuple('o.dead_at', 'o.id'),
        '>',
        eb.tuple(sql`${after.deadAt}::timestamptz`, sql`${after.id}::bigint`),
      ),
    )
  }
  return (await query.orderBy('o.dead_at').orderBy('o.id').limit(limit).execute()) as DeadLetterRow[]
}
