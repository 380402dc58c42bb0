/** Consumer metrics and receipt events, as packages/consumer/README.md shows them: type-checked, never run. */
// #region consumer-metrics
import { consumerMetrics, createConsumer, createPool } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import { Registry } from 'prom-client'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET, source: 'billing' })

const register = new Registry()
await consumerMetrics(consumer, { register }) // outbox_consumer_receipts_total, …_duration_seconds

consumer.on('receipt:failed', ({ eventId, code, error }) =>
  console.error('webhook failed', eventId, code, error),
)
consumer.on('receipt:refused', ({ status, code }) => console.warn('webhook refused', status, code))

const app = express()
app.post(
  '/hooks',
  consumer.dedupe(async (event) => console.log(event.type)),
)
app.get('/metrics', async (_req, res) => {
  res.type(register.contentType).send(await register.metrics())
})
// #endregion consumer-metrics
