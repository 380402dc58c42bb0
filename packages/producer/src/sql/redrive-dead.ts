import { type RawBuilder, sql } from 'kysely'
import type { ResolvedDeadLetterFilter } from '../dead-letter-filter.js'
import { deadLetterWhere } from './dead-letter-where.js'
import type { SqlContext, TransactionContext } from './sql-context.js'

/**
 * Which dead letters an action takes: the given event ids or all of them, narrowed by `subscriptionId` and by a
 * filter (every term ANDed).
 */
export interface DeadLetterSelection {
  readonly eventIds: readonly string[] | 'all'
  readonly subscriptionId?: string | undefined
  readonly filter?: ResolvedDeadLetterFilter | undefined
}

/** The condition a {@link DeadLetterSelection} puts on `outbox o` (besides `status = 'dead'`). */
export function selectionWhere(schema: string, selection: DeadLetterSelection): RawBuilder<boolean> {
  const { eventIds, subscriptionId, filter } = selection
  const byEvent = eventIds === 'all' ? sql`TRUE` : sql`o.event_id = ANY(${eventIds}::uuid[])`
  const bySubscription =
    subscriptionId === undefined ? sql`TRUE` : sql`o.subscription_id = ${subscriptionId}::uuid`
  const byFilter = filter === undefined ? sql`TRUE` : deadLetterWhere(schema, filter)
  return sql<boolean>`(${byEvent} AND ${bySubscription} AND ${byFilter})`
}

/**
 * What {@link redriveDead} would revive, in list order, changing nothing: the dry run of a redrive. Same selection
 * text as the redrive itself, so a real run right after (with no dead letter added or revived meanwhile) revives
 * exactly these.
 */
export async function selectRedrivable(
  ctx: SqlContext,
  request: DeadLetterSelection,
): Promise<{ eventId: string; subscriptionId: string }[]> {
  const { rows } = await sql<{ event_id: string; subscription_id: string }>`
    SELECT o.event_id, o.subscription_id FROM ${sql.id(ctx.schema, 'outbox')} o
    WHERE o.status = 'dead' AND ${selectionWhere(ctx.schema, request)}
    ORDER BY o.dead_at, o.id`.execute(ctx.db)
  return rows.map((row) => ({ eventId: row.event_id, subscriptionId: row.subscription_id }))
}

/**
 * Puts dead letters back to pending; returns each (event, subscription) it revived. Call it in a transaction of its
 * own. An event id is revived in every subscription where it is dead, unless `subscriptionId` (or the filter)
 * narrows it.
 * Every lock and lane below is the (subscription, aggregate) of a revived row: another subscription's lane of the
 * same aggregate is neither locked nor changed (only the aggregate's counter, which they share, is locked).
 *
 * Locks, in this order and each set in byte order of the key (`COLLATE "C"`, as `enqueueMany` sorts):
 * - the aggregates' COUNTER rows, which every enqueue of the aggregate holds until it commits. An enqueue that read
 *   the lane as blocked (and wrote its row at `'infinity'`) has therefore committed before the redrive reads the
 *   lane's rows, so the redrive releases that row too; without this lock the row stayed at `'infinity'` in a lane
 *   no longer blocked, and the aggregate froze for good. Same key order as `enqueueMany`: the two never deadlock.
 * - the LANE rows, which a claim locks too: a redrive never interleaves with a claim of the same lane — the revived
 *   event joins the lane as its head for the NEXT claim, and two requests of one lane are never in flight.
 *
 * The event keeps its id and sequence; attempts and the first-failure time restart. A lane blocked by
 * `onExhausted: 'block'` resumes only when its BLOCKER — its dead row with the highest sequence — is among the
 * revived: reviving an older dead letter alone leaves the lane blocked (its row waits, pending, for the blocker),
 * so `'block'` never bends. A resumed lane's rows held at `'infinity'` become due. A 409 park on a lane that gets
 * a revived row ends: its head changed.
 */
export async function redriveDead(
  ctx: TransactionContext,
  request: DeadLetterSelection,
): Promise<{ eventId: string; subscriptionId: string }[]> {
  const { db: trx, schema } = ctx
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const counter = sql.id(schema, 'outbox_counter')
  const which = selectionWhere(schema, request)
  // A literal status, as the partial index on dead rows is written: its predicate is then provable in any plan.
  const { rows: keys } = await sql<{ subscription_id: string; aggregate_type: string; aggregate_id: string }>`
    SELECT DISTINCT o.subscription_id, o.aggregate_type, o.aggregate_id FROM ${outbox} o
    WHERE o.status = 'dead' AND ${which}`.execute(trx)
  if (keys.length === 0) return []
  const subscriptions = keys.map((key) => key.subscription_id)
  const types = keys.map((key) => key.aggregate_type)
  const ids = keys.map((key) => key.aggregate_id)
  // Lanes are (subscription, aggregate); counters are per aggregate, shared by its subscriptions.
  const chosen = sql`SELECT * FROM unnest(${subscriptions}::uuid[], ${types}::text[], ${ids}::text[])
    AS k(subscription_id, aggregate_type, aggregate_id)`
  const aggregates = sql`SELECT k.aggregate_type, k.aggregate_id FROM (${chosen}) k`
  // Raw SQL from here: row locks taken in byte order (COLLATE "C") and data-modifying CTEs in one statement.
  await sql`
    SELECT 1 FROM ${counter} c WHERE (c.aggregate_type, c.aggregate_id) IN (${aggregates})
    ORDER BY c.aggregate_type COLLATE "C", c.aggregate_id COLLATE "C"
    FOR UPDATE`.execute(trx)
  await sql`
    SELECT 1 FROM ${lane} l WHERE (l.subscription_id, l.aggregate_type, l.aggregate_id) IN (${chosen})
    ORDER BY l.subscription_id, l.aggregate_type COLLATE "C", l.aggregate_id COLLATE "C"
    FOR UPDATE`.execute(trx)
  // A fresh snapshot, now that no enqueue of these aggregates is open: it sees every row they committed.
  const { rows } = await sql<{ event_id: string; subscription_id: string }>`
    WITH target AS (
      SELECT o.id, o.subscription_id, o.aggregate_type, o.aggregate_id FROM ${outbox} o
      WHERE o.status = 'dead' AND ${which} AND (o.subscription_id, o.aggregate_type, o.aggregate_id) IN (${chosen})
    ), blocker AS (
      SELECT DISTINCT ON (d.subscription_id, d.aggregate_type, d.aggregate_id)
             d.id, d.subscription_id, d.aggregate_type, d.aggregate_id
      FROM ${outbox} d
      WHERE d.status = 'dead' AND (d.subscription_id, d.aggregate_type, d.aggregate_id) IN (${chosen})
      ORDER BY d.subscription_id, d.aggregate_type, d.aggregate_id, d.sequence DESC
    ), revived AS (
      UPDATE ${outbox} o
      SET status = 'pending', attempts = 0, takeover_charges = 0, suspect = false, first_failed_at = NULL, available_at = now(), dead_at = NULL
      FROM target t
      WHERE o.id = t.id
      RETURNING o.event_id, o.subscription_id
    ), resumed AS (
      UPDATE ${lane} l
      SET blocked_reason = NULL, blocked_at = NULL
      FROM blocker b JOIN target t ON t.id = b.id
      WHERE l.subscription_id = b.subscription_id AND l.aggregate_type = b.aggregate_type
        AND l.aggregate_id = b.aggregate_id AND l.blocked_reason = 'exhausted'
      RETURNING l.subscription_id, l.aggregate_type, l.aggregate_id
    ), unparked AS (
      UPDATE ${lane} l
      SET blocked_reason = NULL, blocked_at = NULL, conflict_count = 0
      FROM (SELECT DISTINCT subscription_id, aggregate_type, aggregate_id FROM target) t
      WHERE l.subscription_id = t.subscription_id AND l.aggregate_type = t.aggregate_type
        AND l.aggregate_id = t.aggregate_id
        AND l.blocked_reason = 'conflict'
    ), released AS (
      UPDATE ${outbox} o
      SET available_at = now()
      FROM resumed r
      WHERE o.subscription_id = r.subscription_id AND o.aggregate_type = r.aggregate_type
        AND o.aggregate_id = r.aggregate_id AND o.status = 'pending' AND o.available_at = 'infinity'
    )
    SELECT event_id, subscription_id FROM revived`.execute(trx)
  return rows.map((row) => ({ eventId: row.event_id, subscriptionId: row.subscription_id }))
}
