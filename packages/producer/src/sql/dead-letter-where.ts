import { type RawBuilder, sql } from 'kysely'
import type { ResolvedDeadLetterFilter } from '../dead-letter-filter.js'

/**
 * The condition a {@link ResolvedDeadLetterFilter} puts on `outbox o` (the alias every dead-letter statement uses),
 * `TRUE` for an empty filter. The caller adds `o.status = 'dead'` itself, as a literal, so the partial index on dead
 * rows stays provable; these terms only narrow what that index yields.
 *
 * Raw SQL, shared by the list, the redrive and the discard: one text for the three, so the rows an operator listed
 * with a filter are exactly the rows the action with that filter touches. The event-type test calls
 * `outbox_type_matches` (body in migration 0008) so `'order.*'` means here what it means in a subscription.
 */
export function deadLetterWhere(schema: string, filter: ResolvedDeadLetterFilter): RawBuilder<boolean> {
  const terms: RawBuilder<unknown>[] = []
  if (filter.subscriptionId !== undefined) terms.push(sql`o.subscription_id = ${filter.subscriptionId}::uuid`)
  if (filter.tenant !== undefined) terms.push(sql`o.tenant = ${filter.tenant}`)
  if (filter.eventType !== undefined) {
    terms.push(
      sql`${sql.id(schema, 'outbox_type_matches')}(ARRAY[${filter.eventType}]::text[], o.event_type)`,
    )
  }
  if (filter.aggregate !== undefined) {
    terms.push(sql`o.aggregate_type = ${filter.aggregate.type} AND o.aggregate_id = ${filter.aggregate.id}`)
  }
  if (filter.status !== undefined) terms.push(sql`o.last_status = ${filter.status}`)
  if (filter.since !== undefined) terms.push(sql`o.dead_at >= ${filter.since.toISOString()}::timestamptz`)
  if (filter.until !== undefined) terms.push(sql`o.dead_at < ${filter.until.toISOString()}::timestamptz`)
  if (terms.length === 0) return sql<boolean>`TRUE`
  return sql<boolean>`(${sql.join(terms, sql` AND `)})`
}

/**
 * Whether dead row `o` is its lane's BLOCKER: the lane is blocked `'exhausted'` and no dead row of the lane has a
 * higher sequence (the relay blocks on the head it just gave up, which is the highest dead sequence; an older dead
 * letter revived and dead again does not unblock a lane). `l` must be `outbox_lane` joined on o's lane.
 */
export function isBlockerSql(schema: string): RawBuilder<boolean> {
  return sql<boolean>`(l.blocked_reason IS NOT DISTINCT FROM 'exhausted' AND NOT EXISTS (
    SELECT 1 FROM ${sql.id(schema, 'outbox')} h
    WHERE h.subscription_id = o.subscription_id AND h.aggregate_type = o.aggregate_type
      AND h.aggregate_id = o.aggregate_id AND h.status = 'dead' AND h.sequence > o.sequence))`
}
