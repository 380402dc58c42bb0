import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/**
 * Reads the stored trace context (migration 0015) of the given outbox rows: a map from row id to its JSON text, for
 * the rows that have one. Run by the relay once per claim (and per further batch of a lane), only when a tracer
 * provider is registered — never otherwise, so a relay without tracing sends no extra statement.
 *
 * Why a statement of its own and not a column of the claim: the claim function is being replaced by a later
 * migration, and a claim that returned the column would have to be rewritten with it; folding this read into the
 * claim is a follow-up once that settles. The rows are found by primary key, and the claim has just read them, so
 * the pages are in the cache: one index probe per row.
 */
export async function selectTraceContexts(
  ctx: SqlContext,
  request: { readonly ids: readonly string[] },
): Promise<Map<string, string>> {
  // Raw SQL: `= ANY` over a typed array parameter, as the other by-id statements take their ids.
  const { rows } = await sql<{ id: string; trace_context: string }>`
    SELECT o.id, o.trace_context FROM ${sql.id(ctx.schema, 'outbox')} o
    WHERE o.id = ANY(${request.ids}::bigint[]) AND o.trace_context IS NOT NULL`.execute(ctx.db)
  return new Map(rows.map((row) => [row.id, row.trace_context]))
}
