import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** Which rows a prune pass may delete: one status, past its age, never a lane's blocker. */
function expired(schema: string, alias: string, status: 'sent' | 'dead', olderThanMs: number) {
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const o = sql.id(alias)
  const column = sql.id(alias, status === 'sent' ? 'sent_at' : 'dead_at')
  const age = sql`${o}.status = ${status} AND ${column} < now() - ${olderThanMs} * interval '1 millisecond'`
  if (status === 'sent') return age
  // The dead letter that blocks its lane ('block': the lane's dead row with the highest sequence) is kept whatever
  // its age: only its redrive can resume the lane, and with it gone every later event of the aggregate would wait
  // at 'infinity' for good.
  return sql`${age} AND NOT EXISTS (
    SELECT 1 FROM ${lane} l
    WHERE l.subscription_id = ${o}.subscription_id AND l.aggregate_type = ${o}.aggregate_type
      AND l.aggregate_id = ${o}.aggregate_id AND l.blocked_reason = 'exhausted'
      AND NOT EXISTS (
        SELECT 1 FROM ${outbox} later
        WHERE later.subscription_id = ${o}.subscription_id AND later.aggregate_type = ${o}.aggregate_type
          AND later.aggregate_id = ${o}.aggregate_id
          AND later.status = 'dead' AND later.sequence > ${o}.sequence
      )
  )`
}

/**
 * Deletes at most `limit` rows of one status older than `olderThanMs` in DATABASE time (the clock that stamped
 * them); returns how many went.
 *
 * Why `id IN (SELECT … LIMIT)`: PostgreSQL's DELETE has no LIMIT, and a bounded batch keeps each transaction
 * short (no long lock holds, no WAL bursts) while the partial index on `sent_at`/`dead_at` finds the oldest rows
 * without touching pending ones. Why the condition is written twice: the inner SELECT picks candidates from its
 * snapshot, and a row changed meanwhile (a dead letter redriven to pending, by a transaction the DELETE waited for)
 * is re-checked by PostgreSQL against the DELETE's OWN conditions only — with `id IN (…)` alone, that was just its
 * id, and a redriven event was deleted while pending.
 */
export async function deleteExpired(
  ctx: SqlContext,
  request: { readonly status: 'sent' | 'dead'; readonly olderThanMs: number; readonly limit: number },
): Promise<number> {
  const { db, schema } = ctx
  const { status, olderThanMs, limit } = request
  const outbox = sql.id(schema, 'outbox')
  const column = sql.id(status === 'sent' ? 'sent_at' : 'dead_at')
  // Raw SQL: the builder has no DELETE … WHERE id IN (SELECT … ORDER BY … LIMIT) with a shared condition.
  const result = await sql`
    DELETE FROM ${outbox} o WHERE o.id IN (
      SELECT c.id FROM ${outbox} c
      WHERE ${expired(schema, 'c', status, olderThanMs)}
      ORDER BY c.${column}
      LIMIT ${limit}
    ) AND ${expired(schema, 'o', status, olderThanMs)}`.execute(db)
  return Number(result.numAffectedRows ?? 0n)
}

/**
 * Whether any row of one status is older than `olderThanMs` (and may be deleted): the cheap probe (one index
 * entry) that tells a prune which stopped at its batch budget whether it had in fact finished.
 */
export async function hasExpired(
  ctx: SqlContext,
  request: { readonly status: 'sent' | 'dead'; readonly olderThanMs: number },
): Promise<boolean> {
  const { db, schema } = ctx
  const { status, olderThanMs } = request
  const outbox = sql.id(schema, 'outbox')
  // Raw SQL: the expiry condition is a shared raw fragment (see expired()), with a correlated NOT EXISTS.
  const { rows } = await sql<{ found: boolean }>`
    SELECT EXISTS (
      SELECT 1 FROM ${outbox} c WHERE ${expired(schema, 'c', status, olderThanMs)}
    ) AS found`.execute(db)
  return rows[0]?.found === true
}
