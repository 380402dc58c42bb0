import { sql } from 'kysely'
import type { AttemptOutcome } from './delivery-attempt-log.js'
import type { SqlContext } from './sql-context.js'

/** A delivery log row as stored. */
export interface DeliveryAttemptRow {
  id: string
  subscription_id: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: string
  attempted_at: Date
  duration_ms: number | null
  http_status: number | null
  outcome: AttemptOutcome
  answer: string | null
  error: string | null
  /** `attempted_at` in UTC to the microsecond, for the page cursor. */
  attempted_at_cursor: string
}

/** Which attempts {@link selectDeliveryAttempts} reads; every filter given must hold. */
export interface DeliveryAttemptFilter {
  readonly subscriptionId?: string | undefined
  readonly eventId?: string | undefined
  readonly aggregate?: { readonly type: string; readonly id: string } | undefined
}

/**
 * Reads the delivery log newest first, keyset-paginated on `(attempted_at, id)` so pages stay stable while the
 * relay appends. Each filter has its index (migration 0010): one subscription's history walks
 * `(subscription_id, attempted_at, id)` backwards, an aggregate's `(aggregate_type, aggregate_id, attempted_at)`,
 * an event's `(event_id)` (a handful of rows, sorted after), and no filter `(attempted_at, id)`.
 *
 * Why the cursor carries `attempted_at` as microsecond text: a JavaScript Date keeps milliseconds, so a cursor
 * built from it would not sort exactly where its row does, and a page could repeat or skip rows.
 */
export async function selectDeliveryAttempts(
  ctx: SqlContext,
  page: {
    readonly filter: DeliveryAttemptFilter
    readonly limit: number
    readonly after?: { readonly attemptedAt: string; readonly id: string } | undefined
  },
): Promise<DeliveryAttemptRow[]> {
  const { filter, limit, after } = page
  let query = ctx.db
    .withSchema(ctx.schema)
    .selectFrom('outbox_delivery_attempt')
    .select([
      'id',
      'subscription_id',
      'event_id',
      'aggregate_type',
      'aggregate_id',
      'sequence',
      'attempted_at',
      'duration_ms',
      'http_status',
      'outcome',
      'answer',
      'error',
      sql<string>`to_char(attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as(
        'attempted_at_cursor',
      ),
    ])
  if (filter.subscriptionId !== undefined) query = query.where('subscription_id', '=', filter.subscriptionId)
  if (filter.eventId !== undefined) query = query.where('event_id', '=', filter.eventId)
  if (filter.aggregate !== undefined) {
    query = query
      .where('aggregate_type', '=', filter.aggregate.type)
      .where('aggregate_id', '=', filter.aggregate.id)
  }
  if (after) {
    query = query.where((eb) =>
      eb(
        eb.refTuple('attempted_at', 'id'),
        '<',
        eb.tuple(sql`${after.attemptedAt}::timestamptz`, sql`${after.id}::bigint`),
      ),
    )
  }
  return (await query
    .orderBy('attempted_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute()) as DeliveryAttemptRow[]
}
