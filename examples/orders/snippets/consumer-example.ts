/** The main example of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-example
import { createConsumer, migrate } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

interface Database {
  orders: { id: string; status: string }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
// Without these, a database restart crashes the process with an unhandled 'error' event.
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
await migrate(db)

const { dedupe } = createConsumer({
  db,
  secret: process.env.WEBHOOK_SECRET, // 'whsec_…', or [new, old] while rotating
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
