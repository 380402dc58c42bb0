import { randomUUID } from 'node:crypto'
import { migrate } from '@outbox/consumer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import type { BenchDatabases } from './databases.js'

/** One webhook as the relay sends it: the envelope's JSON and the headers that go with it (unsigned). */
export interface Webhook {
  readonly eventId: string
  readonly body: string
  readonly headers: Record<string, string>
}

/**
 * `count` `order.updated` webhooks in delivery order: event _n_ belongs to aggregate `n mod aggregates` with
 * sequence `⌊n / aggregates⌋ + 1` (counted from `first`), its payload the order's new status.
 */
export function buildWebhooks(count: number, aggregates: number, first = 0): Webhook[] {
  return Array.from({ length: count }, (_, i) => {
    const n = first + i
    const eventId = randomUUID()
    const aggregateId = String(n % aggregates)
    const sequence = Math.floor(n / aggregates) + 1
    const body = JSON.stringify({
      event_id: eventId,
      type: 'order.updated',
      aggregate_type: 'order',
      aggregate_id: aggregateId,
      sequence,
      occurred_at: new Date(0).toISOString(),
      data: { order_id: aggregateId, status: `s${sequence}` },
    })
    return {
      eventId,
      body,
      headers: {
        'content-type': 'application/json',
        'x-idempotency-key': eventId,
        'x-event-sequence': String(sequence),
      },
    }
  })
}

/**
 * A template database for the consumer cases: the consumer's migrations, an `orders` table with one row per
 * aggregate (what every handler updates), and whatever `extra` statements a case adds (its baselines' tables).
 * Each run then copies it, so all runs start from identical rows.
 */
export async function createConsumerTemplate(
  databases: BenchDatabases,
  aggregates: number,
  extra: readonly string[] = [],
): Promise<string> {
  const template = await databases.create('tpl')
  const db = openKysely(databases.url(template), { max: 1 })
  try {
    await migrate(db)
    await sql`CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`.execute(db)
    await sql`INSERT INTO orders SELECT n::text, 'created' FROM generate_series(0, ${aggregates - 1}) AS n`.execute(
      db,
    )
    for (const statement of extra) await sql.raw(statement).execute(db)
  } finally {
    await db.destroy()
  }
  return template
}
