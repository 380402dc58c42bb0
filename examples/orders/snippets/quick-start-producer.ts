/** The root README's quick start, where events are written: type-checked in CI, never run. */
// #region quick-start-producer
import { enqueue, migrate } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
// Without these two, one database restart crashes the process (see "Every pg.Pool needs two error listeners").
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) }) // or your own Kysely<Database>

await migrate(db) // once at start-up: the outbox tables, beside yours; idempotent

// Wherever the service changes state: the change and its event commit together, or neither does.
await db.transaction().execute(async (trx) => {
  await trx.updateTable('invoices').set({ status: 'paid' }).where('id', '=', 'inv_42').execute()
  await enqueue(trx, {
    aggregateType: 'invoice', // with aggregateId: the events of one invoice are delivered in order
    aggregateId: 'inv_42',
    eventType: 'invoice.paid',
    payload: { invoiceId: 'inv_42', amountCents: 4200 },
  })
})
// #endregion quick-start-producer
