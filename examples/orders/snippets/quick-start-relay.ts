/**
 * The root README's quick start, the relay in a process of its own (`relay.ts`): type-checked in CI, and run as the
 * README shows it, Ctrl-C included, by test/packages/newcomer.test.ts.
 */
// #region quick-start-relay
import { migrate, Relay } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const pool = new pg.Pool({ connectionString: databaseUrl })
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
await migrate(db) // idempotent: whichever process starts first creates the outbox tables

const relay = new Relay({
  db, // the database the events were enqueued in
  endpoint: process.env.OUTBOX_ENDPOINT ?? 'http://127.0.0.1:3000/hooks', // the subscriber's webhook URL
  secret: process.env.OUTBOX_SECRET, // whsec_…: the subscriber verifies every request with the same
  listen: { connectionString: databaseUrl }, // wake at each commit: PostgreSQL itself, not a transaction pooler
})
relay.on('delivery:success', ({ eventType, eventId, deliveryStatus }) =>
  console.log(`delivered ${eventType} ${eventId}: ${deliveryStatus}`),
)
relay.on('delivery:retry', ({ eventType, eventId, error, retryInMs }) =>
  console.log(`${eventType} ${eventId} failed (${error}), next attempt in ${retryInMs / 1000} s`),
)
relay.on('relay:stopped', ({ lanes }) => console.log(`relay stopped: ${lanes} lanes in flight handed back`))
await relay.start()
console.log('relay started (Ctrl-C stops it)')

// Ctrl-C or SIGTERM: stop claiming, let requests in flight finish (10 s at most), write the marks, hand the lanes
// back, close the pool. `on`, not `once`: npx and tsx pass a Ctrl-C on, so it may come twice; stop() is idempotent.
const stop = () => void relay.stop({ timeoutMs: 10_000 }).then(() => db.destroy())
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
// #endregion quick-start-relay
