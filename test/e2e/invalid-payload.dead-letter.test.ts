// One stream typed end to end — the producer enqueues under a catalog, the consumer checks payloads with a Standard
// Schema — and what happens when a producer that does not share the catalog sends a payload that does not fit:
// the consumer answers 422 invalid_payload and records nothing, the relay counts each answer as a failed attempt,
// and the event ends as a dead letter whose last error is the consumer's problem document.
import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createConsumer, type ReceiptEventMap } from '@outbox/consumer'
import { enqueue, listDeadLetters, Relay, silentLogger, stats } from '@outbox/producer'
import type { EventCatalog } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'

const t = useTestDatabase()

interface OrderEvents extends EventCatalog {
  'order.created': { order_id: string; total_cents: number }
}

interface Db {
  order_totals: { order_id: string; total_cents: number }
}

beforeAll(async () => {
  await sql`CREATE TABLE order_totals (order_id text PRIMARY KEY, total_cents integer NOT NULL)`.execute(t.db)
})

async function serveConsumer(db: Kysely<Db>, secret: string) {
  const consumer = createConsumer<Db, OrderEvents>({
    db,
    secret,
    logger: silentLogger,
    schemas: {
      'order.created': z.object({ order_id: z.string(), total_cents: z.number().int().nonnegative() }),
    },
  })
  const refused: ReceiptEventMap['receipt:refused'][] = []
  consumer.on('receipt:refused', (event) => refused.push(event))
  const server = createServer(
    consumer.node(async (event, trx) => {
      // Narrowed by the catalog, checked by the schema: no cast, and the number really is a number.
      await trx
        .insertInto('order_totals')
        .values({ order_id: event.data.order_id, total_cents: event.data.total_cents })
        .execute()
    }),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
  const close = () =>
    new Promise<void>((resolve, reject) => {
      server.closeAllConnections()
      server.close((error) => (error ? reject(error) : resolve()))
    })
  return { url, refused, close }
}

describe('a payload that fails the consumer’s schema ends as an inspectable dead letter', () => {
  it('422 is a failed attempt: retried, then dead-lettered with the problem body, and never recorded', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`
    const db = t.db as Kysely<any>
    await db.transaction().execute(async (trx) => {
      await enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: '42',
        eventType: 'order.created',
        payload: { order_id: '42', total_cents: 4200 },
      })
      // A producer built without the catalog: a string where the consumer's schema wants a number.
      await enqueue(trx, {
        aggregateType: 'order',
        aggregateId: '43',
        eventType: 'order.created',
        payload: { order_id: '43', total_cents: '12.50' },
      })
    })
    const consumer = await serveConsumer(db, secret)
    const dead: string[] = []
    try {
      const relay = new Relay({
        db,
        endpoint: consumer.url,
        secret,
        retrySchedule: [0, 0],
        logger: silentLogger,
      })
      relay.on('delivery:dead', (event) => dead.push(event.eventId))
      for (let cycle = 0; cycle < 6 && (await stats(db)).pending > 0; cycle++) await relay.runOnce()
      await relay.stop()
    } finally {
      await consumer.close()
    }

    const rows = await db
      .selectFrom('outbox')
      .select(['event_id', 'aggregate_id', 'status', 'attempts', 'last_status'])
      .orderBy('aggregate_id')
      .execute()
    expect(rows.map(({ aggregate_id, status }) => [aggregate_id, status])).toEqual([
      ['42', 'sent'],
      ['43', 'dead'],
    ])
    const poison = rows[1]!
    // Every attempt the schedule allows was made: 422 is not success, and not a 409-style wait either.
    expect(poison).toMatchObject({ attempts: 3, last_status: 422 })
    expect(dead).toEqual([poison.event_id])
    expect(consumer.refused.map((event) => [event.eventId, event.status, event.code])).toEqual(
      Array.from({ length: 3 }, () => [poison.event_id, 422, 'invalid_payload']),
    )

    // The dead letter carries the consumer's answer: which problem, and what to fix in the payload.
    const [letter] = await listDeadLetters(db)
    expect(letter).toMatchObject({ eventId: poison.event_id, lastStatus: 422 })
    expect(letter!.lastError).toMatch(/^HTTP 422: \{/)
    const problem = JSON.parse(letter!.lastError!.slice('HTTP 422: '.length))
    expect(problem).toMatchObject({ status: 422, code: 'invalid_payload' })
    expect(problem.errors).toHaveLength(1)
    expect(problem.errors[0]).toMatch(/^data\.total_cents: /)

    // Only the valid event left a trace on the consumer's side.
    const processed = await db.selectFrom('processed_events').select('event_id').execute()
    expect(processed.map((row) => row.event_id)).toEqual([rows[0]!.event_id])
    expect(await db.selectFrom('order_totals').selectAll().execute()).toEqual([
      { order_id: '42', total_cents: 4200 },
    ])
  })
})
