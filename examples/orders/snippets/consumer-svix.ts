/** The Svix / Standard Webhooks recipe of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-svix
import { createConsumer, createPool, standardWebhooksEnvelope, svixVerifier } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

interface Database {
  users: { id: string; email: string }
}

const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: createPool() }) })
const svix = createConsumer<Database>({
  db,
  verify: svixVerifier(process.env.SVIX_WEBHOOK_SECRET ?? ''), // 'whsec_…'; svix-* or webhook-* headers
  // eventId ← webhook-id (svix-id), type ← body.type, data ← body.data, occurredAt ← body.timestamp
  envelope: standardWebhooksEnvelope,
  source: 'svix',
  sequence: 'off', // Standard Webhooks carry no sequence
})

const app = express()
app.post(
  '/webhooks/svix',
  svix.dedupe<{ id: string; email: string }>(async (event, trx) => {
    if (event.type === 'user.created') await trx.insertInto('users').values(event.data).execute()
  }),
)
app.listen(3000)
// #endregion consumer-svix
