import { sql } from 'kysely'
import { OutboxError } from '../errors.js'
import { isBlockerSql } from './dead-letter-where.js'
import { describeLane, type LaneKey } from './lock-lane.js'
import { type DeadLetterSelection, selectionWhere } from './redrive-dead.js'
import type { SqlContext, TransactionContext } from './sql-context.js'

/** A dead row a discard would delete, with whether it blocks its lane and how many rows that block parks. */
export interface DiscardableRow {
  readonly id: string
  readonly eventId: string
  readonly subscriptionId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly blocksLane: boolean
  /** Pending rows the lane holds at `'infinity'` behind the block (0 for a non-blocker). */
  readonly parked: number
}

/**
 * The dead rows a selection picks, in list order, each with whether it is its lane's blocker (the lane blocked
 * `'exhausted'`, no dead row of the lane above it) and, for a blocker, how many rows its block parks. Raw SQL: the
 * blocker test and the parked count are correlated subqueries; the status literal keeps the partial index on dead
 * rows provable.
 */
export async function selectDiscardable(
  ctx: SqlContext,
  selection: DeadLetterSelection,
): Promise<DiscardableRow[]> {
  const outbox = sql.id(ctx.schema, 'outbox')
  const lane = sql.id(ctx.schema, 'outbox_lane')
  const { rows } = await sql<{
    id: string
    event_id: string
    subscription_id: string
    aggregate_type: string
    aggregate_id: string
    blocks_lane: boolean
    parked: string
  }>`
    SELECT b.*, CASE WHEN b.blocks_lane THEN (
             SELECT count(*) FROM ${outbox} p
             WHERE p.subscription_id = b.subscription_id AND p.aggregate_type = b.aggregate_type
               AND p.aggregate_id = b.aggregate_id AND p.status = 'pending' AND p.available_at = 'infinity')
           ELSE 0 END AS parked
    FROM (
      SELECT o.id, o.event_id, o.subscription_id, o.aggregate_type, o.aggregate_id, o.dead_at,
             ${isBlockerSql(ctx.schema)} AS blocks_lane
      FROM ${outbox} o
      LEFT JOIN ${lane} l ON l.subscription_id = o.subscription_id AND l.aggregate_type = o.aggregate_type
        AND l.aggregate_id = o.aggregate_id
      WHERE o.status = 'dead' AND ${selectionWhere(ctx.schema, selection)}
    ) b
    ORDER BY b.dead_at, b.id`.execute(ctx.db)
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    subscriptionId: row.subscription_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    blocksLane: row.blocks_lane,
    parked: Number(row.parked),
  }))
}

/**
 * Locks the sequence counters of these lanes' aggregates, in byte order (`COLLATE "C"`), before the caller takes
 * each lane with `lockLaneForAction`: the same order as `redriveDead` and `enqueueMany` (all counters, then the
 * lanes), so a discard of several lanes never deadlocks with them. Waits at most 5 s, as `lockLaneForAction` does.
 */
export async function lockCounters(ctx: TransactionContext, lanes: readonly LaneKey[]): Promise<void> {
  if (lanes.length === 0) return
  const types = lanes.map((lane) => lane.aggregateType)
  const ids = lanes.map((lane) => lane.aggregateId)
  // Raw SQL: row locks in byte order, under a transaction-local lock timeout.
  await sql`SELECT set_config('lock_timeout', '5s', true)`.execute(ctx.db)
  try {
    await sql`
      SELECT 1 FROM ${sql.id(ctx.schema, 'outbox_counter')} c
      WHERE (c.aggregate_type, c.aggregate_id) IN (SELECT * FROM unnest(${types}::text[], ${ids}::text[]))
      ORDER BY c.aggregate_type COLLATE "C", c.aggregate_id COLLATE "C"
      FOR UPDATE`.execute(ctx.db)
  } catch (error) {
    if ((error as { code?: unknown }).code === '55P03') {
      throw new OutboxError(
        'ERR_OUTBOX_LANE_BUSY',
        `an enqueue or another action held ${lanes.map(describeLane).slice(0, 5).join(', ')}${lanes.length > 5 ? ', …' : ''} for more than 5 s; try again`,
        { cause: error },
      )
    }
    throw error
  }
  await sql`SELECT set_config('lock_timeout', '0', true)`.execute(ctx.db)
}

/**
 * Deletes these dead rows, re-checked in the statement itself: a row no longer dead (a concurrent redrive revived
 * it) is left alone, as is one that is now its lane's blocker (the caller released the lanes it meant to; any other
 * blocker deleted would leave its lane frozen, `blocked_without_dead_letter`). Returns what it deleted.
 */
export async function deleteDeadRows(
  ctx: TransactionContext,
  ids: readonly string[],
): Promise<{ eventId: string; subscriptionId: string }[]> {
  if (ids.length === 0) return []
  const outbox = sql.id(ctx.schema, 'outbox')
  const lane = sql.id(ctx.schema, 'outbox_lane')
  // Raw SQL: the blocker re-check is a correlated subquery on the lane and the lane's dead rows.
  const { rows } = await sql<{ event_id: string; subscription_id: string }>`
    DELETE FROM ${outbox} o
    WHERE o.id = ANY(${ids}::bigint[]) AND o.status = 'dead'
      AND NOT EXISTS (
        SELECT 1 FROM ${lane} l
        WHERE l.subscription_id = o.subscription_id AND l.aggregate_type = o.aggregate_type
          AND l.aggregate_id = o.aggregate_id AND l.blocked_reason = 'exhausted'
          AND NOT EXISTS (
            SELECT 1 FROM ${outbox} h
            WHERE h.subscription_id = o.subscription_id AND h.aggregate_type = o.aggregate_type
              AND h.aggregate_id = o.aggregate_id AND h.status = 'dead' AND h.sequence > o.sequence))
    RETURNING o.event_id, o.subscription_id`.execute(ctx.db)
  return rows.map((row) => ({ eventId: row.event_id, subscriptionId: row.subscription_id }))
}
