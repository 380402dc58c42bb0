/** The Fastify plugin, as packages/consumer/README.md shows it: type-checked in CI, never run. */
// #region consumer-fastify
import { createConsumer, createPool } from '@outbox/consumer'
import { outboxWebhooks } from '@outbox/consumer/fastify'
import Fastify from 'fastify'
import { Kysely, PostgresDialect } from 'kysely'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })

const app = Fastify()
// Encapsulated: the plugin reads its own route's raw body; the JSON parser of every other route is untouched.
await app.register(outboxWebhooks, {
  consumer,
  path: '/hooks',
  handler: async (event, trx, request) => {
    await trx.insertInto('audit_log').values({ event_id: event.eventId, type: event.type }).execute()
    request.log.info({ eventId: event.eventId }, 'applied')
  },
})
app.post('/orders', async (request) => ({ received: request.body })) // still parsed as JSON
await app.listen({ port: 3000 })
// #endregion consumer-fastify
