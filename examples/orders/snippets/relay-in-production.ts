/** A relay set up for production, as packages/producer/README.md shows it: type-checked in CI, never run. */
// #region relay-in-production
import { Relay } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { Registry } from 'prom-client'

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/app'
const pool = new pg.Pool({ connectionString: databaseUrl })
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })

const register = new Registry() // serve `await register.metrics()` at GET /metrics
const relay = new Relay({
  db,
  endpoint: 'https://billing.internal/hooks',
  secret: process.env.OUTBOX_SECRET, // whsec_…, or [new, old] while rotating
  listen: { connectionString: databaseUrl }, // NOTIFY wake-ups: PostgreSQL itself, not a transaction pooler
  metrics: { register },
})
relay.on('delivery:dead', (dead) => {
  console.error(`gave up on ${dead.eventType} ${dead.eventId} after ${dead.attempts} attempts: ${dead.error}`)
})
relay.on('lane:blocked', (blocked) => {
  console.warn(`${blocked.aggregateType} ${blocked.aggregateId} waits: ${blocked.reason}`)
})

await relay.start()
process.once('SIGTERM', () => {
  // Stop claiming, let requests in flight finish (10 s at most), write the marks, hand the lanes back.
  void relay.stop({ timeoutMs: 10_000 }).then(() => db.destroy())
})
// #endregion relay-in-production
