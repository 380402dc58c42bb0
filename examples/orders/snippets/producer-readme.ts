/** The code of packages/producer/README.md, region by region: type-checked in CI, never run. */
// #region schema
import { migrate } from '@outbox/producer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
// Without these two, one database restart crashes the process (see the root README's "Every pg.Pool needs two
// error listeners").
pool.on('error', (error) => console.warn('idle connection lost', error.message))
pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
await migrate(db) // or migrate(db, { schema: 'outbox' })

// #endregion schema

// #region enqueue
import { enqueue, enqueueMany } from '@outbox/producer'

const { eventId, sequence } = await db.transaction().execute(async (trx) => {
  await trx.insertInto('orders').values({ id: '42', status: 'placed' }).execute()
  return await enqueue(trx, {
    aggregateType: 'order',
    aggregateId: '42',
    eventType: 'order.placed',
    payload: { orderId: '42', totalCents: 4200 },
  })
})

await db.transaction().execute(async (trx) => {
  // Several events, several aggregates: ids and sequences come back in input order.
  await enqueueMany(trx, [
    { aggregateType: 'order', aggregateId: '42', eventType: 'order.paid', payload: {} },
    { aggregateType: 'customer', aggregateId: '7', eventType: 'customer.charged', payload: { cents: 4200 } },
  ])
})

// #endregion enqueue
console.log(eventId, sequence)

// #region typed-events
import type { EventCatalog } from '@outbox/protocol'

// In a module the producer and its subscribers share: each event type and the type of its payload.
export interface OrderEvents extends EventCatalog {
  'order.placed': { orderId: string; totalCents: number }
  'order.cancelled': { orderId: string; reason: string }
}

await db.transaction().execute(async (trx) => {
  await enqueue<OrderEvents>(trx, {
    aggregateType: 'order',
    aggregateId: '42',
    eventType: 'order.cancelled',
    payload: { orderId: '42', reason: 'out of stock' },
  })
  // @ts-expect-error 'order.placed' needs totalCents: a payload that does not fit its eventType does not compile
  await enqueue<OrderEvents>(trx, {
    aggregateType: 'order',
    aggregateId: '43',
    eventType: 'order.placed',
    payload: { orderId: '43', reason: 'wrong event' },
  })
})

// #endregion typed-events

// #region prune
import { prune } from '@outbox/producer'

const { removed, caughtUp } = await prune(db, { retention: '30d', deadLetterRetention: '90d' })
if (!caughtUp) console.warn(`removed ${removed}, then stopped at maxBatches: run prune again`)

// #endregion prune

// #region stats
import { stats } from '@outbox/producer'

const { lagSeconds, pending, inFlight, struggling, dead, blocked } = await stats(db)
// #endregion stats
console.log({ lagSeconds, pending, inFlight, struggling, dead, blocked })

// #region delivery-log
import { IMPLICIT_SUBSCRIPTION_ID, listDeliveryAttempts } from '@outbox/producer'

// "We never got order 42": every attempt for that aggregate, newest first, per subscription.
const attempts = await listDeliveryAttempts(db, { aggregateType: 'order', aggregateId: '42', limit: 20 })
for (const { attemptedAt, subscriptionId, outcome, httpStatus, durationMs, answer, error } of attempts) {
  console.log(attemptedAt, subscriptionId, outcome, httpStatus, durationMs, answer ?? error)
}
const older = await listDeliveryAttempts(db, {
  subscriptionId: IMPLICIT_SUBSCRIPTION_ID,
  after: attempts.at(-1)?.cursor,
})
// #endregion delivery-log
console.log(older.length)

// #region dead-letters
import { listDeadLetters, redrive } from '@outbox/producer'

const page = await listDeadLetters(db, { limit: 50 }) // oldest first, with lastStatus and lastError
const next = await listDeadLetters(db, { limit: 50, after: page.at(-1)?.cursor })
const { redriven, notDead } = await redrive(db, { eventIds: page.map((letter) => letter.eventId) })
await redrive(db, { all: true })

// #endregion dead-letters

// #region integrity
import { checkIntegrity, repairIntegrity } from '@outbox/producer'

const report = await checkIntegrity(db, { maxLeaseMs: 60_000 }) // { ok, violations, findings }
if (!report.ok) await repairIntegrity(db) // lane by lane, like a claim; returns what it did and a fresh check
// #endregion integrity
console.log(next.length, redriven, notDead)

// #region subscriptions
import { createSubscription, Relay } from '@outbox/producer'

// Once per customer endpoint (or from the CLI: outbox subscriptions create --url … --tenant acme).
const { id: acmeId, secret: acmeSecret } = await createSubscription(db, {
  url: 'https://acme.example/hooks',
  name: 'acme',
  tenant: 'acme', // only Acme's events
  eventTypes: ['order.*'], // exact types, or prefixes ending in *
  maxInFlight: 8, // at most 8 of its lanes in flight, across every relay
})
// `acmeSecret` is returned this once: hand it to Acme, whose consumer verifies with it.

// In the business transaction, the tenant routes the event.
await db.transaction().execute((trx) =>
  enqueue(trx, {
    aggregateType: 'order',
    aggregateId: '42',
    eventType: 'order.created',
    payload: { orderId: '42' },
    tenant: 'acme',
  }),
)

// A relay without `endpoint` serves every enabled stored subscription.
const relay = new Relay({ db })
await relay.start()
// #endregion subscriptions
console.log(acmeId, acmeSecret)
