import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** What one backfill batch did (see `outbox_backfill_batch`, migration 0014). */
export interface BackfillBatchRow {
  /**
   * `copied`: committed, more is left; `done`: the copy reached the end; `waiting`: a transaction holding an
   * aggregate of the batch outlasted the lock timeout (nothing copied); `busy`: another relay runs a batch of it;
   * `none`: no backfill runs for it (done, never asked, or the subscription is gone).
   */
  readonly outcome: 'copied' | 'done' | 'waiting' | 'busy' | 'none'
  readonly aggregatesDone: number
  readonly aggregatesTotal: number | null
  readonly events: number
  /** Events this batch copied. */
  readonly copied: number
  readonly waitingSince: Date | null
}

/**
 * Runs one batch of a subscription's backfill: one call of `outbox_backfill_batch` (its body is in migration 0014),
 * so the batch is one statement, one transaction and one round trip. A function rather than statements sent one by
 * one: the lock timeout's rollback must undo the copy but keep the stall's record, which a block with an exception
 * handler does inside one transaction; and a relay stopped or killed between statements would otherwise leave a
 * transaction open holding counter locks that hold enqueues back.
 */
export async function runBackfillBatch(
  ctx: SqlContext,
  request: {
    readonly subscriptionId: string
    readonly aggregates: number
    readonly rows: number
    readonly lockTimeoutMs: number
  },
): Promise<BackfillBatchRow> {
  const { db, schema } = ctx
  const { rows } = await sql<{
    outcome: BackfillBatchRow['outcome']
    aggregates_done: string | null
    aggregates_total: string | null
    events: string | null
    copied: string
    waiting_since: Date | null
  }>`
    SELECT * FROM ${sql.id(schema, 'outbox_backfill_batch')}(
      ${request.subscriptionId}::uuid, ${request.aggregates}::integer, ${request.rows}::integer,
      ${request.lockTimeoutMs}::integer)`.execute(db)
  const row = rows[0]!
  return {
    outcome: row.outcome,
    aggregatesDone: Number(row.aggregates_done ?? 0),
    aggregatesTotal: row.aggregates_total === null ? null : Number(row.aggregates_total),
    events: Number(row.events ?? 0),
    copied: Number(row.copied),
    waitingSince: row.waiting_since,
  }
}
