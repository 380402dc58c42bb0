/** The pool a team hands the relay (packages/producer/README.md, network faults): type-checked in CI, never run. */
// #region pool

import { dropTimedOutConnections } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const pool = dropTimedOutConnections(
  new pg.Pool({
    connectionString: process.env.DATABASE_URL,
    connectionTimeoutMillis: 10_000, // a host that accepts TCP and never answers fails the connect
    statement_timeout: 30_000, // server side: a statement stuck on a lock is cancelled, with a reason (57014)
    query_timeout: 35_000, // client side, a margin later: fires only when nothing comes back at all
    idle_in_transaction_session_timeout: 10_000, // server side: frees the lane rows a cut-off relay locked
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  }),
)
pool.on('error', () => {}) // an idle connection cut by the server: the pool replaces it
pool.on('connect', (client) => client.on('error', () => {})) // one cut while lent out: its query fails instead
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })

// #endregion pool

export { db }
