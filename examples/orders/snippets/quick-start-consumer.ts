/**
 * The root README's quick start, where events are applied (`consumer.ts`): type-checked in CI, and run as the README
 * shows it, with the README's `curl` request too, by test/packages/newcomer.test.ts.
 */
// #region quick-start-consumer
import { createConsumer, createPool, migrate } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

// A pg.Pool that survives a database restart: a lost connection fails one delivery (500, retried), not the process.
const pool = createPool({ connectionString: process.env.DATABASE_URL }) // the subscriber's own database
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })

await migrate(db) // processed_events and consumer_cursors; idempotent
await db.schema // your own table, created here only so that the example runs as it is
  .createTable('payments')
  .ifNotExists()
  .addColumn('invoice_id', 'text', (column) => column.primaryKey())
  .addColumn('received_at', 'timestamptz', (column) => column.notNull())
  .execute()

const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
consumer.on('receipt:applied', ({ eventType, eventId }) => console.log(`applied ${eventType} ${eventId}`))
const app = express()
// No body parser in front of the consumer: it reads the raw bytes itself, as the signature covers them.
app.post(
  '/hooks',
  consumer.dedupe(async (event, trx) => {
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
app.use(express.json()) // parsers for your other routes go after the consumer
const port = Number(process.env.PORT ?? 3000)
app.listen(port, () => console.log(`listening on http://127.0.0.1:${port}/hooks`))
// #endregion quick-start-consumer
