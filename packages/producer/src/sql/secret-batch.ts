import { sql } from 'kysely'
import type { SqlContext } from './sql-context.js'

/** One stored secret as `reencryptSecrets` reads it. */
export interface StoredSecretRow {
  readonly id: string
  readonly subscription_id: string
  readonly secret: string
}

/**
 * Rewrites the secrets after `afterId` (in id order, at most `limit`) in ONE transaction: the rows are read
 * `FOR UPDATE`, so a rotation running meanwhile (which updates `expires_at` of the same rows) waits for this batch
 * instead of racing it, and `rewrite` decides each row's new stored value (undefined: leave it). A batch keeps its
 * locks for a few milliseconds only, and each batch commits on its own, so a stopped run keeps what it converted and
 * the next run picks up after it. Returns the rows read, for the caller's counts and the next `afterId`.
 */
export async function rewriteSecretBatch(
  ctx: SqlContext,
  request: {
    readonly afterId: string
    readonly limit: number
    readonly rewrite: (row: StoredSecretRow) => string | undefined
  },
): Promise<{ rows: StoredSecretRow[]; rewritten: number }> {
  const { db, schema } = ctx
  const table = sql.id(schema, 'outbox_subscription_secret')
  return await db.transaction().execute(async (trx) => {
    // By the identity primary key: a keyset walk that never revisits a row, whatever rotations add meanwhile.
    const { rows } = await sql<StoredSecretRow>`
      SELECT id::text AS id, subscription_id, secret FROM ${table}
      WHERE id > ${request.afterId}::bigint ORDER BY id LIMIT ${request.limit}
      FOR UPDATE`.execute(trx)
    const ids: string[] = []
    const values: string[] = []
    for (const row of rows) {
      const next = request.rewrite(row)
      if (next === undefined || next === row.secret) continue
      ids.push(row.id)
      values.push(next)
    }
    if (ids.length > 0) {
      await sql`
        UPDATE ${table} AS k SET secret = v.secret
        FROM unnest(${ids}::bigint[], ${values}::text[]) AS v(id, secret)
        WHERE k.id = v.id`.execute(trx)
    }
    return { rows, rewritten: ids.length }
  })
}
