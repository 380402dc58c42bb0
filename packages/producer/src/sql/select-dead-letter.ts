import { sql } from 'kysely'
import { isBlockerSql } from './dead-letter-where.js'
import type { DeadLetterRow } from './select-dead-letters.js'
import type { SqlContext } from './sql-context.js'

/** A dead-letter row with what its detail view shows besides the list's columns. */
export interface DeadLetterDetailRow extends DeadLetterRow {
  payload: unknown
  /** The newest answer body the delivery log holds for this (event, subscription); null when none. */
  last_answer: string | null
}

/**
 * One event's dead letter, in the subscription given or, when none is, its first (oldest death, then row id) among
 * the subscriptions where it is dead. Raw SQL: the blocker test and the newest logged answer are correlated
 * subqueries; the event id narrows the partial index on dead rows to a few rows, and the log's `(event_id)` index
 * serves the answer.
 */
export async function selectDeadLetter(
  ctx: SqlContext,
  key: { readonly eventId: string; readonly subscriptionId?: string | undefined },
): Promise<DeadLetterDetailRow | undefined> {
  const outbox = sql.id(ctx.schema, 'outbox')
  const subscription = sql.id(ctx.schema, 'outbox_subscription')
  const lane = sql.id(ctx.schema, 'outbox_lane')
  const log = sql.id(ctx.schema, 'outbox_delivery_attempt')
  const which =
    key.subscriptionId === undefined ? sql`TRUE` : sql`o.subscription_id = ${key.subscriptionId}::uuid`
  const { rows } = await sql<DeadLetterDetailRow>`
    SELECT o.id, o.event_id, o.subscription_id, s.name AS subscription_name, o.tenant, o.aggregate_type,
           o.aggregate_id, o.sequence, o.event_type, o.attempts, o.last_status, o.last_error, o.last_attempt_at,
           o.created_at, o.dead_at, o.payload,
           ${isBlockerSql(ctx.schema)} AS blocks_lane,
           to_char(o.dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS dead_at_cursor,
           (SELECT a.answer FROM ${log} a
            WHERE a.event_id = o.event_id AND a.subscription_id = o.subscription_id AND a.answer IS NOT NULL
            ORDER BY a.attempted_at DESC, a.id DESC LIMIT 1) AS last_answer
    FROM ${outbox} o
    LEFT JOIN ${subscription} s ON s.id = o.subscription_id
    LEFT JOIN ${lane} l ON l.subscription_id = o.subscription_id AND l.aggregate_type = o.aggregate_type
      AND l.aggregate_id = o.aggregate_id
    WHERE o.status = 'dead' AND o.event_id = ${key.eventId}::uuid AND ${which}
    ORDER BY o.dead_at, o.id
    LIMIT 1`.execute(ctx.db)
  return rows[0]
}
