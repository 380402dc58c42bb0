import { type Kysely, sql, type Transaction } from 'kysely'

/**
 * Runs a page's reads in one transaction with `statement_timeout` set for it alone (`set_config(…, true)` is
 * `SET LOCAL`): a slow query behind a page gives up after `timeoutMs` instead of holding a connection of the
 * application's pool while an operator keeps refreshing. Actions do not run here; they use the pool as it is.
 */
export function readSnapshot<T>(
  db: Kysely<any>,
  timeoutMs: number,
  read: (trx: Transaction<any>) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('statement_timeout', ${String(timeoutMs)}, true)`.execute(trx)
    return read(trx)
  })
}
