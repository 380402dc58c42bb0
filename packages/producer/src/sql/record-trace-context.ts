import { sql } from 'kysely'
import { withCurrentSchema } from '../schema-outdated.js'
import type { TransactionContext } from './sql-context.js'

/**
 * Stores the trace context of events an `enqueueMany` just wrote (migration 0015's column), in the caller's
 * transaction: every row of those events, one per subscription that took them. Only called when a trace is active,
 * so an `enqueueMany` without tracing sends no extra statement. The rows are found by the `(event_id,
 * subscription_id)` index; the same transaction inserted them, so no other transaction waits on them. A schema
 * without the column is thrown as `ERR_OUTBOX_SCHEMA_OUTDATED`.
 */
export async function recordTraceContext(
  ctx: TransactionContext,
  request: { readonly eventIds: readonly string[]; readonly traceContext: string },
): Promise<void> {
  // Raw SQL: `= ANY` over a typed array parameter, as the other by-id statements take their ids.
  await withCurrentSchema(ctx.schema, () =>
    sql`
      UPDATE ${sql.id(ctx.schema, 'outbox')} SET trace_context = ${request.traceContext}
      WHERE event_id = ANY(${request.eventIds}::uuid[])`.execute(ctx.db),
  )
}
