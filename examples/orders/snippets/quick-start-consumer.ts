/** The root README's quick start, where events are applied: type-checked in CI, never run. */
// #region quick-start-consumer
import { createConsumer, createPool, migrate } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

// A pg.Pool that survives a database restart: a lost connection fails one delivery (500, retried), not the process.
const pool = createPool({ connectionString: process.env.DATABASE_URL }) // the subscriber's own database
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
