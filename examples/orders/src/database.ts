import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Most connections the pool opens. @defaultValue 10 */
  readonly max?: number
  /** Told when the server ends a connection (a restart, a failover, `pg_terminate_backend`). */
  readonly onError?: (error: Error) => void
}

/**
 * Opens a Kysely instance on its own `pg.Pool`. The caller owns it: `await db.destroy()` ends the pool.
 *
 * The two `error` listeners are not optional. When PostgreSQL ends a connection, `pg` emits `'error'` — on
 * the pool for an idle client, on the client itself for one that is checked out (the pool removes its own
 * listener while it lends a client). An `'error'` event nobody listens to is an uncaught exception in Node:
 * one database restart would crash every service. With the listeners, the query in progress fails (its caller
 * sees why), the broken connection is discarded, and the next query opens a fresh one.
 */
export function connect<DB>(connectionString: string, options: ConnectOptions = {}): Kysely<DB> {
  const onError = options.onError ?? ((error) => console.warn(`database connection lost: ${error.message}`))
  // #region pool
  const pool = new pg.Pool({ connectionString, max: options.max ?? 10 })
  pool.on('error', onError) // an idle connection was cut
  pool.on('connect', (client) => client.on('error', onError)) // a checked-out one was
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) })
  // #endregion pool
  return db
}
