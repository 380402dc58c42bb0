/** The root README's quick start, where events are applied: type-checked in CI, never run. */
// #region quick-start-consumer
import { createConsumer, migrate } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL }) // the subscriber's own database
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })

await migrate(db) // processed_events and consumer_cursors; idempotent

const { dedupe } = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
const app = express()
// No body parser in front of dedupe: it reads the raw bytes itself, as the signature covers them.
app.post(
  '/hooks',
  dedupe(async (event, trx) => {
    // Runs once per event id, in the transaction that records it: write the effect on trx, or throw to
    // have the relay send the event again later.
    if (event.type === 'invoice.paid') {
      await trx
        .insertInto('payments')
        .values({ invoice_id: event.aggregateId, received_at: new Date() })
        .execute()
    }
  }),
)
app.use(express.json()) // parsers for your other routes go after dedupe
app.listen(3000)
// #endregion quick-start-consumer
