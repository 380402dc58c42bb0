/** The root README's quick start, the relay in a process of its own: type-checked in CI, never run. */
// #region quick-start-relay
import { Relay } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/app'
const pool = new pg.Pool({ connectionString: databaseUrl })
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })

const relay = new Relay({
  db, // the database the events were enqueued in
  endpoint: process.env.OUTBOX_ENDPOINT ?? 'http://127.0.0.1:3000/hooks', // the subscriber's webhook URL
  secret: process.env.OUTBOX_SECRET, // whsec_…: the subscriber verifies every request with the same
  listen: { connectionString: databaseUrl }, // wake at each commit: PostgreSQL itself, not a transaction pooler
})
await relay.start()
process.once('SIGTERM', () => {
  // Stop claiming, let requests in flight finish (10 s at most), write the marks, hand the lanes back.
  void relay.stop({ timeoutMs: 10_000 }).then(() => db.destroy())
})
// #endregion quick-start-relay
