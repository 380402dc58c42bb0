import { type Kysely, sql } from 'kysely'

/**
 * Deletes at most `limit` rows of one status older than `olderThanMs` in DATABASE time (the clock that stamped
 * them); returns how many went.
 *
 * Why `id IN (SELECT … LIMIT)`: PostgreSQL's DELETE has no LIMIT, and a bounded batch keeps each transaction
 * short (no long lock holds, no WAL bursts) while the partial index on `sent_at`/`dead_at` finds the oldest rows
 * without touching pending ones.
 */
export async function deleteExpired(
  db: Kysely<any>,
  schema: string,
  status: 'sent' | 'dead',
  olderThanMs: number,
  limit: number,
): Promise<number> {
  const outbox = sql.id(schema, 'outbox')
  const column = sql.id(status === 'sent' ? 'sent_at' : 'dead_at')
  const result = await sql`
    DELETE FROM ${outbox} WHERE id IN (
      SELECT id FROM ${outbox}
      WHERE status = ${status} AND ${column} < now() - ${olderThanMs} * interval '1 millisecond'
      ORDER BY ${column}
      LIMIT ${limit}
    )`.execute(db)
  return Number(result.numAffectedRows ?? 0n)
}

/**
 * Whether any row of one status is older than `olderThanMs`: the cheap probe (one index entry) that tells a prune
 * which stopped at its batch budget whether it had in fact finished.
 */
export async function hasExpired(
  db: Kysely<any>,
  schema: string,
  status: 'sent' | 'dead',
  olderThanMs: number,
): Promise<boolean> {
  const outbox = sql.id(schema, 'outbox')
  const column = sql.id(status === 'sent' ? 'sent_at' : 'dead_at')
  const { rows } = await sql<{ found: boolean }>`
    SELECT EXISTS (
      SELECT 1 FROM ${outbox} WHERE status = ${status} AND ${column} < now() - ${olderThanMs} * interval '1 millisecond'
    ) AS found`.execute(db)
  return rows[0]?.found === true
}
