import type { Kysely } from 'kysely'
import { sql } from 'kysely'

/**
 * Fails if the transaction is aborted; used after the handler when no cursor update follows (`sequence: 'off'`).
 *
 * PostgreSQL answers `COMMIT` on an aborted transaction with a silent rollback, not an error. A handler that
 * caught and swallowed a database error would thus get `200 applied` with nothing committed — a lost effect the
 * producer would never retry. Any statement in an aborted transaction raises 25P02, so this cheap one catches it.
 */
export async function checkTransactionAlive(db: Kysely<any>): Promise<void> {
  await sql`select 1`.execute(db)
}
