import { sql } from 'kysely'
import type { TransactionContext } from './sql-context.js'

/** A lane of a disabled subscription holding deliveries past the disabled retention. */
export interface DroppableLaneRow {
  aggregate_type: string
  aggregate_id: string
  /** The highest pending sequence past the retention: every pending row at or below it may go. */
  upto: string
}

/** Where a drop pass resumes in a subscription's lanes: at a lane (inclusive) or just after it. */
export interface LaneCursor {
  readonly aggregateType: string
  readonly aggregateId: string
  readonly inclusive: boolean
}

/**
 * The next `limit` lanes (in key order, from `after`) of a subscription, locked by the caller as disabled past the
 * retention, that hold a pending row past the retention — with, for each, the HIGHEST such sequence. A row qualifies
 * when `greatest(created_at, disabled_at)` is older than the retention; `created_at` is the enqueuing transaction's
 * start and need not grow with the sequence, so the drop takes every pending row up to that sequence (a prefix of
 * the lane), never the qualifying rows alone: the lane keeps a contiguous tail.
 *
 * Shape: the lanes come from the lane table's primary key in key order (one subscription's range, resumed by a row
 * comparison), and each lane's highest qualifying row from the pending index read BACKWARDS from the lane's top,
 * stopping at the first qualifying row, so a lane costs its young rows at most, not its whole backlog. Lanes with
 * nothing past the retention drop out of the lateral join. No lock: the caller locks the lanes it then drops.
 */
export async function selectDroppableLanes(
  ctx: TransactionContext,
  request: {
    readonly subscriptionId: string
    readonly retentionMs: number
    readonly after: LaneCursor | null
    readonly limit: number
  },
): Promise<DroppableLaneRow[]> {
  const { db: trx, schema } = ctx
  const { subscriptionId, retentionMs, after, limit } = request
  const lane = sql.id(schema, 'outbox_lane')
  const outbox = sql.id(schema, 'outbox')
  const subscription = sql.id(schema, 'outbox_subscription')
  const from =
    after === null
      ? sql`TRUE`
      : after.inclusive
        ? sql`(l.aggregate_type, l.aggregate_id) >= (${after.aggregateType}, ${after.aggregateId})`
        : sql`(l.aggregate_type, l.aggregate_id) > (${after.aggregateType}, ${after.aggregateId})`
  // Raw SQL: a LATERAL top-1 per lane and a row comparison, which the builder has no readable form for.
  const { rows } = await sql<DroppableLaneRow>`
    SELECT l.aggregate_type, l.aggregate_id, m.upto
    FROM ${lane} l
    JOIN ${subscription} s ON s.id = l.subscription_id
    CROSS JOIN LATERAL (
      SELECT o.sequence AS upto FROM ${outbox} o
      WHERE o.subscription_id = l.subscription_id AND o.aggregate_type = l.aggregate_type
        AND o.aggregate_id = l.aggregate_id AND o.status = 'pending'
        AND greatest(o.created_at, s.disabled_at) < now() - ${retentionMs} * interval '1 millisecond'
      ORDER BY o.sequence DESC
      LIMIT 1
    ) m
    WHERE l.subscription_id = ${subscriptionId}::uuid AND ${from}
    ORDER BY l.aggregate_type, l.aggregate_id
    LIMIT ${limit}`.execute(trx)
  return rows
}
