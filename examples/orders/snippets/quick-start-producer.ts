/**
 * The root README's quick start, where events are written (`producer.ts`): type-checked in CI, and run as the README
 * shows it, in a fresh npm app on the oldest and newest supported Node.js, by test/packages/newcomer.test.ts.
 */
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
await db.schema // your own table, created here only so that the example runs as it is
  .createTable('invoices')
  .ifNotExists()
  .addColumn('id', 'text', (column) => column.primaryKey())
  .addColumn('amount_cents', 'integer', (column) => column.notNull())
  .addColumn('status', 'text', (column) => column.notNull())
  .execute()

// Wherever the service changes state: the change and its event commit together, or neither does.
const invoiceId = `inv_${Date.now()}`
const event = await db.transaction().execute(async (trx) => {
  await trx.insertInto('invoices').values({ id: invoiceId, amount_cents: 4200, status: 'paid' }).execute()
  return await enqueue(trx, {
    aggregateType: 'invoice', // with aggregateId: the events of one invoice are delivered in order
    aggregateId: invoiceId,
    eventType: 'invoice.paid',
    payload: { invoiceId, amountCents: 4200 },
  })
})
console.log(`invoice ${invoiceId} paid: event ${event.eventId} is in the outbox`)
await db.destroy() // closes the pool, so that the process exits
// #endregion quick-start-producer
