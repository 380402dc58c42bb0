/**
 * The orders service: an Express app that writes each order change and the event announcing it in ONE
 * transaction with `enqueue`, so an event exists exactly when its change committed. It never calls a
 * subscriber itself; the relay (relay.ts) delivers the events.
 *
 *   POST /orders                  { "customer": "ada", "totalCents": 4200 }  → 201, event order.created
 *   PATCH|POST /orders/:id/status { "status": "paid" }                       → 200, event order.updated
 *   GET /orders/:id
 *
 * Run it alone: DATABASE_URL=postgres://… PORT=3000 pnpm --filter @outbox/example-orders orders-service
 */
import { type EnqueuedEvent, enqueue, migrate, type ProducerDatabase } from '@outbox/producer'
import express, { type ErrorRequestHandler, type Express, type RequestHandler } from 'express'
import { type Generated, type Kysely, type Selectable, sql } from 'kysely'
import { connect } from './database.js'
import { portFromEnv, requireEnv } from './env.js'
import { isOrderStatus, type OrderEvents, type OrderStatus } from './order-events.js'
import { serve } from './serve.js'
import { isMain, stopOnSignal } from './shutdown.js'

/** The service's own table. The outbox tables belong to `@outbox/producer` and live next to it. */
export interface OrdersTable {
  id: Generated<string>
  customer: string
  total_cents: number
  status: OrderStatus
  created_at: Generated<Date>
  updated_at: Generated<Date>
}

/** The orders service's database, as Kysely sees it: its own table and, next to it, the outbox tables. */
export interface OrdersDatabase extends ProducerDatabase {
  orders: OrdersTable
}

/** An order as the API returns it. */
export interface Order {
  readonly id: string
  readonly customer: string
  readonly totalCents: number
  readonly status: OrderStatus
  readonly createdAt: string
  readonly updatedAt: string
}

function toOrder(row: Selectable<OrdersTable>): Order {
  return {
    id: row.id,
    customer: row.customer,
    totalCents: row.total_cents,
    status: row.status,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  }
}

/**
 * Creates the outbox tables (with the producer's own migration table, apart from the service's) and the
 * `orders` table. A real service runs its table through its usual migration tool; `migrate` fits next to any
 * of them.
 */
export async function migrateOrders(db: Kysely<OrdersDatabase>): Promise<void> {
  await migrate(db)
  await db.schema
    .createTable('orders')
    .ifNotExists()
    .addColumn('id', 'uuid', (column) => column.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('customer', 'text', (column) => column.notNull())
    .addColumn('total_cents', 'integer', (column) => column.notNull())
    .addColumn('status', 'text', (column) => column.notNull())
    .addColumn('created_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`now()`))
    .execute()
}

/** Options of {@link createOrdersApp}. */
export interface OrdersAppOptions {
  readonly db: Kysely<OrdersDatabase>
  /**
   * Called once a transaction that enqueued an event has committed: from here on the event exists and the
   * relay will deliver it. (The demo times delivery latency from this moment.)
   */
  readonly onCommitted?: (event: EnqueuedEvent) => void
  /** Told about requests that failed on our side (answered 500). @defaultValue console.error */
  readonly onError?: (error: unknown) => void
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The orders API. Every write commits the change and its event together. */
export function createOrdersApp({ db, onCommitted, onError = logError }: OrdersAppOptions): Express {
  const app = express()
  app.use(express.json())

  app.post('/orders', async (req, res) => {
    const { customer, totalCents } = (req.body ?? {}) as { customer?: unknown; totalCents?: unknown }
    if (typeof customer !== 'string' || customer.trim() === '' || !isPositiveInteger(totalCents)) {
      res.status(400).json({ error: 'send {"customer": "ada", "totalCents": 4200}' })
      return
    }
    // #region create-order
    // The order and its event commit together or not at all: never an event about an order that was rolled
    // back, never an order whose event was lost between two writes.
    const { order, event } = await db.transaction().execute(async (trx) => {
      const order = await trx
        .insertInto('orders')
        .values({ customer, total_cents: totalCents, status: 'placed' })
        .returningAll()
        .executeTakeFirstOrThrow()
      const event = await enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: order.id,
        eventType: 'order.created',
        payload: { orderId: order.id, customer, totalCents, status: order.status },
      })
      return { order, event }
    })
    // #endregion create-order
    onCommitted?.(event)
    res.status(201).json({ order: toOrder(order), event })
  })

  const changeStatus: RequestHandler<{ id: string }> = async (req, res) => {
    const { status } = (req.body ?? {}) as { status?: unknown }
    if (!isOrderStatus(status)) {
      res
        .status(400)
        .json({ error: 'send {"status": "paid"} (placed, paid, packed, shipped, delivered, cancelled)' })
      return
    }
    const id = req.params.id
    if (!UUID.test(id)) {
      res.status(404).json({ error: 'no such order' })
      return
    }
    const changed = await db.transaction().execute(async (trx) => {
      // The UPDATE locks the order row until commit, so two changes of one order queue here; enqueue then
      // gives each its next sequence in that same (commit) order.
      const order = await trx
        .updateTable('orders')
        .set({ status, updated_at: sql`now()` })
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirst()
      if (!order) return undefined // nothing changed, so nothing to announce
      const event = await enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: order.id,
        eventType: 'order.updated',
        payload: { orderId: order.id, status },
      })
      return { order, event }
    })
    if (!changed) {
      res.status(404).json({ error: 'no such order' })
      return
    }
    onCommitted?.(changed.event)
    res.json({ order: toOrder(changed.order), event: changed.event })
  }
  app.patch('/orders/:id/status', changeStatus)
  app.post('/orders/:id/status', changeStatus)

  app.get('/orders/:id', async (req, res) => {
    const row = UUID.test(req.params.id)
      ? await db.selectFrom('orders').selectAll().where('id', '=', req.params.id).executeTakeFirst()
      : undefined
    if (row) res.json(toOrder(row))
    else res.status(404).json({ error: 'no such order' })
  })

  // Express 5 hands rejected async handlers here. A client's mistake (bad JSON: express.json() sets `status`)
  // keeps its 4xx; anything else is ours: logged, answered without internals.
  const answerError: ErrorRequestHandler = (error, _req, res, _next) => {
    const status = typeof error?.status === 'number' && error.status < 500 ? (error.status as number) : 500
    if (status === 500) onError(error)
    res.status(status).json({ error: status === 500 ? 'internal error' : String(error.message) })
  }
  app.use(answerError)
  return app
}

function logError(error: unknown): void {
  console.error('orders service: request failed', error)
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value > 0
}

async function main(): Promise<void> {
  const db = connect<OrdersDatabase>(requireEnv('DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/orders'))
  try {
    await migrateOrders(db)
    const server = await serve(createOrdersApp({ db }), portFromEnv('PORT', 3000), process.env.HOST)
    console.log(`orders service: listening on ${server.url}`)
    stopOnSignal('orders service', async () => {
      await server.close()
      await db.destroy()
    })
  } catch (error) {
    await db.destroy()
    throw error
  }
}

if (isMain(import.meta.url)) {
  main().catch((error: unknown) => {
    console.error(`orders service: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
