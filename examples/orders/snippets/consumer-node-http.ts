/** The node:http adapter, as packages/consumer/README.md shows it: type-checked in CI, never run. */
// #region consumer-node-http
import { createServer } from 'node:http'
import { createConsumer, createPool } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })

// (req, res) => void; the handler's third argument is the IncomingMessage.
const onWebhook = consumer.node(async (event, trx) => {
  await trx.insertInto('audit_log').values({ event_id: event.eventId, type: event.type }).execute()
})

createServer((req, res) => {
  if (req.url === '/hooks') return onWebhook(req, res) // any method: it answers 405 to all but POST
  res.writeHead(404).end()
}).listen(3000)
// #endregion consumer-node-http
