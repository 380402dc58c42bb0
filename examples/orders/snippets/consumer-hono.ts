/** The fetch adapter in a Hono app, as packages/consumer/README.md shows it: type-checked in CI, never run. */
// #region consumer-hono
import { serve } from '@hono/node-server'
import { createConsumer, createPool } from '@outbox/consumer'
import { Hono } from 'hono'
import { Kysely, PostgresDialect } from 'kysely'

interface Database {
  orders: { id: string; status: string }
}

const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })

// (request: Request) => Promise<Response>: Hono, Next.js route handlers (`export const POST = …`), Bun and Deno
// mount it as it is. The third argument of the handler is the web Request.
const onWebhook = consumer.fetch<{ order_id: string; status: string }>(async (event, trx, request) => {
  await trx
    .updateTable('orders')
    .set({ status: event.data.status })
    .where('id', '=', event.data.order_id)
    .execute()
  console.log('applied', event.eventId, 'from', request.headers.get('user-agent'))
})

const app = new Hono()
app.post('/hooks', (c) => onWebhook(c.req.raw)) // the raw Request: its body not yet read
serve({ fetch: app.fetch, port: 3000 })
// #endregion consumer-hono
