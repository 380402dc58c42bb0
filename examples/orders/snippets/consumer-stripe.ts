/** The Stripe recipe of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-stripe
import { createConsumer, createPool, stripeEnvelope, stripeVerifier } from '@outbox/consumer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

interface Database {
  payments: { invoice_id: string; customer: string; amount_cents: number }
}
// What the handler reads of an invoice event's `data` (not checked at run time: see the `schemas` option).
interface InvoiceData {
  object: { id: string; customer: string; amount_paid: number }
}

const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: createPool() }) })
const stripe = createConsumer<Database>({
  db,
  verify: stripeVerifier(process.env.STRIPE_WEBHOOK_SECRET ?? ''), // 'whsec_…', or [new, old] while rolling
  envelope: stripeEnvelope, // eventId ← id (evt_…), type ← type, data ← data, occurredAt ← created
  source: 'stripe', // Stripe's ids are kept apart from every other sender's
  sequence: 'off', // no aggregate sequence, and Stripe delivers in any order
})

const app = express()
app.post(
  '/webhooks/stripe',
  stripe.dedupe<InvoiceData>(async (event, trx) => {
    if (event.type === 'invoice.paid') {
      const invoice = event.data.object
      await trx
        .insertInto('payments')
        .values({ invoice_id: invoice.id, customer: invoice.customer, amount_cents: invoice.amount_paid })
        .execute()
    }
    // Other types: return, so the event is recorded and answered 200.
  }),
)
app.listen(3000)
// #endregion consumer-stripe
