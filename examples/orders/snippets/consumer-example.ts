/** The main example of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-example
import { createConsumer, createPool, migrate } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

interface Database {
  orders: { id: string; status: string }
}

// A pg.Pool with the two 'error' listeners without which a database restart crashes the process.
const pool = createPool({ connectionString: process.env.DATABASE_URL })
const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
await migrate(db)

const { dedupe } = createConsumer({
  db,
  secret: process.env.OUTBOX_SECRET, // 'whsec_…', or [new, old] while rotating
  sequence: 'monotonic',
})

const app = express()
// Mount dedupe with NO body parser in front of it: signatures cover the exact raw bytes.
app.post(
  '/hooks',
  dedupe<{ order_id: string; status: string }>(async (event, trx) => {
    // event: { eventId, type, aggregateType, aggregateId, sequence, occurredAt, data }; the third
    // argument is the Express request.
    await trx
      .updateTable('orders')
      .set({ status: event.data.status })
      .where('id', '=', event.data.order_id)
      .execute()
  }),
)
app.use(express.json()) // parsers for your other routes go after (or on other routers)
app.listen(3000)
// #endregion consumer-example
