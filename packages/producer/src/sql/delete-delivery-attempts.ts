import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/**
 * Deletes at most `limit` delivery log rows older than `olderThanMs` in DATABASE time; returns how many went.
 *
 * Why `id IN (SELECT … ORDER BY attempted_at LIMIT)`: PostgreSQL's DELETE has no LIMIT, and a bounded batch keeps
 * each transaction short; the `(attempted_at, id)` index finds the oldest rows first. Unlike the outbox's prune,
 * nothing can change a log row between the SELECT and the DELETE (rows are only ever inserted), so the age
 * condition need not be repeated.
 */
export async function deleteDeliveryAttempts(
  ctx: SqlContext,
  request: { readonly olderThanMs: number; readonly limit: number },
): Promise<number> {
  const { db, schema } = ctx
  const table = sql.id(schema, 'outbox_delivery_attempt')
  // Raw SQL: the builder has no DELETE … WHERE id IN (SELECT … ORDER BY … LIMIT).
  const result = await sql`
    DELETE FROM ${table} WHERE id IN (
      SELECT a.id FROM ${table} a
      WHERE a.attempted_at < now() - ${request.olderThanMs} * interval '1 millisecond'
      ORDER BY a.attempted_at
      LIMIT ${request.limit}
    )`.execute(db)
  return Number(result.numAffectedRows ?? 0n)
}

/** Whether any delivery log row is older than `olderThanMs`: one index entry, to tell a stopped prune if it is done. */
export async function hasExpiredDeliveryAttempts(
  ctx: SqlContext,
  request: { readonly olderThanMs: number },
): Promise<boolean> {
  const { db, schema } = ctx
  // Raw SQL: written as its DELETE twin's condition, so the two cannot drift apart in what counts as expired.
  const { rows } = await sql<{ found: boolean }>`
    SELECT EXISTS (
      SELECT 1 FROM ${sql.id(schema, 'outbox_delivery_attempt')}
      WHERE attempted_at < now() - ${request.olderThanMs} * interval '1 millisecond'
    ) AS found`.execute(db)
  return rows[0]?.found === true
}
