/**
 * The subscriber: another service, with its own database, that keeps a copy of every order and its history.
 * It mounts `dedupe(handler)` from `@outbox/consumer`, which turns the relay's at-least-once deliveries into
 * changes applied exactly once and, per order, in sequence order.
 *
 *   POST /hooks       the relay's webhooks (Standard Webhooks, signed with OUTBOX_SECRET)
 *   GET /orders/:id   this service's copy of an order
 *
 * Run it alone: DATABASE_URL=postgres://… PORT=3001 OUTBOX_SECRET=whsec_… pnpm --filter
 * @outbox/example-orders subscriber
 */
import { createConsumer, createPool, type Logger, migrate } from '@outbox/consumer'
import express, { type ErrorRequestHandler, type Express } from 'express'
import { type ColumnType, type Generated, Kysely, PostgresDialect, sql } from 'kysely'
import { portFromEnv, requireEnv } from './env.js'
import type { OrderEvents, OrderStatus } from './order-events.js'
import { serve } from './serve.js'
import { isMain, stopOnSignal } from './shutdown.js'

/** A `bigint` column: pg returns it as a string. */
type Bigint = ColumnType<string, number, number>

/** This service's copy of an order: the state after the last event applied. */
export interface OrderCopiesTable {
  order_id: string
  customer: string
  total_cents: number
  status: OrderStatus
  /** Sequence of the last event applied to this row. */
  sequence: Bigint
  updated_at: Generated<Date>
}

/** Every event applied, in the order it was applied: the order's history as this service saw it. */
export interface OrderTimelineTable {
  id: Generated<string>
  event_id: string
  order_id: string
  sequence: Bigint
  event_type: string
  status: OrderStatus
  applied_at: Generated<Date>
}

/**
 * The subscriber's database, as Kysely sees it (the consumer's own tables are `@outbox/consumer`'s business).
 */
export interface SubscriberDatabase {
  order_copies: OrderCopiesTable
  order_timeline: OrderTimelineTable
}

/** Creates the consumer's tables (`processed_events`, `consumer_cursors`) and this service's own. */
export async function migrateSubscriber(db: Kysely<SubscriberDatabase>): Promise<void> {
  await migrate(db)
  await db.schema
    .createTable('order_copies')
    .ifNotExists()
    .addColumn('order_id', 'text', (column) => column.primaryKey())
    .addColumn('customer', 'text', (column) => column.notNull())
    .addColumn('total_cents', 'integer', (column) => column.notNull())
    .addColumn('status', 'text', (column) => column.notNull())
    .addColumn('sequence', 'bigint', (column) => column.notNull())
    .addColumn('updated_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`now()`))
    .execute()
  await db.schema
    .createTable('order_timeline')
    .ifNotExists()
    .addColumn('id', 'bigint', (column) => column.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('event_id', 'uuid', (column) => column.notNull())
    .addColumn('order_id', 'text', (column) => column.notNull())
    .addColumn('sequence', 'bigint', (column) => column.notNull())
    .addColumn('event_type', 'text', (column) => column.notNull())
    .addColumn('status', 'text', (column) => column.notNull())
    // clock_timestamp(), not now(): when the change was written, not when its transaction began.
    .addColumn('applied_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`clock_timestamp()`))
    .execute()
  await db.schema
    .createIndex('order_timeline_order_idx')
    .ifNotExists()
    .on('order_timeline')
    .columns(['order_id', 'id'])
    .execute()
}

/** Options of {@link createSubscriberApp}. */
export interface SubscriberAppOptions {
  readonly db: Kysely<SubscriberDatabase>
  /** The Standard Webhooks secret(s) the relay signs with, `whsec_…`; unsigned requests are refused. */
  readonly secret?: string | readonly string[]
  /** Accept unsigned webhooks when there is no secret (a closed network, a local try-out). @defaultValue false */
  readonly allowUnsigned?: boolean
  /** Where the consumer logs refusals and failures. @defaultValue warnings and errors to the console */
  readonly logger?: Logger
}

/** The subscriber's HTTP API: the webhook endpoint and a read of its copies. */
export function createSubscriberApp({ db, secret, allowUnsigned, logger }: SubscriberAppOptions): Express {
  const app = express()
  // #region consumer
  const { dedupe } = createConsumer<SubscriberDatabase, OrderEvents>({
    db,
    ...(secret === undefined ? { allowUnsigned } : { secret }),
    logger,
  })

  // No body parser in front of dedupe: it reads the raw bytes itself, as the signature covers them.
  app.post(
    '/hooks',
    dedupe(async (event, trx) => {
      // Runs in the transaction that records event.eventId: a redelivery never gets here (it is answered
      // duplicate_ignored), and if anything throws, neither the change nor the id is kept; the relay retries.
      // `event.data` narrows by `event.type` through the catalog: no cast.
      if (event.type === 'order.created') {
        const { customer, totalCents, status } = event.data
        await trx
          .insertInto('order_copies')
          .values({
            order_id: event.aggregateId,
            customer,
            total_cents: totalCents,
            status,
            sequence: event.sequence,
          })
          .execute()
      } else if (event.type === 'order.updated') {
        await trx
          .updateTable('order_copies')
          .set({ status: event.data.status, sequence: event.sequence, updated_at: sql`now()` })
          .where('order_id', '=', event.aggregateId)
          .execute()
      } else {
        return // a type this service does not handle (yet): acknowledged, nothing to change
      }
      await trx
        .insertInto('order_timeline')
        .values({
          event_id: event.eventId,
          order_id: event.aggregateId,
          sequence: event.sequence,
          event_type: event.type,
          status: event.data.status,
        })
        .execute()
    }),
  )
  // #endregion consumer

  app.get('/orders/:id', async (req, res) => {
    const copy = await db
      .selectFrom('order_copies')
      .selectAll()
      .where('order_id', '=', req.params.id)
      .executeTakeFirst()
    if (!copy) {
      res.status(404).json({ error: 'no such order (yet)' })
      return
    }
    const history = await db
      .selectFrom('order_timeline')
      .select(['sequence', 'event_type', 'status', 'applied_at'])
      .where('order_id', '=', req.params.id)
      .orderBy('id')
      .execute()
    res.json({ ...copy, history })
  })

  const onError: ErrorRequestHandler = (error, _req, res, _next) => {
    console.error('subscriber: request failed', error)
    res.status(500).json({ error: 'internal error' })
  }
  app.use(onError)
  return app
}

async function main(): Promise<void> {
  // createPool: a pg.Pool a database restart cannot crash (and the one createConsumer recognises as guarded).
  const pool = createPool({
    connectionString: requireEnv('DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/subscriber'),
  })
  const db = new Kysely<SubscriberDatabase>({ dialect: new PostgresDialect({ pool }) })
  try {
    await migrateSubscriber(db)
    const secret = process.env.OUTBOX_SECRET || undefined
    const allowUnsigned = process.env.ALLOW_UNSIGNED === '1'
    if (secret === undefined && !allowUnsigned) {
      throw new Error(
        "set OUTBOX_SECRET to the relay's whsec_… secret, or ALLOW_UNSIGNED=1 to accept unsigned webhooks on a closed network",
      )
    }
    const app = createSubscriberApp({ db, secret, allowUnsigned })
    const server = await serve(app, portFromEnv('PORT', 3001), process.env.HOST)
    console.log(`subscriber: listening on ${server.url}, webhooks at ${server.url}/hooks`)
    stopOnSignal('subscriber', async () => {
      // In-flight webhooks finish and commit before the pool closes; the relay retries anything refused
      // meanwhile.
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
    console.error(`subscriber: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
