/** Typed events and payload schemas, as packages/consumer/README.md shows them: type-checked in CI, never run. */
// #region consumer-typed
import { createConsumer, createPool } from '@outbox/consumer'
import type { EventCatalog } from '@outbox/protocol'
import { Kysely, PostgresDialect } from 'kysely'
import { z } from 'zod'

// Shared with the producer: enqueue<OrderEvents> refuses a payload that does not fit its event type.
interface OrderEvents extends EventCatalog {
  'order.created': { order_id: string; total_cents: number }
  'order.cancelled': { order_id: string; reason: string }
}

interface Database {
  orders: { id: string; status: string; total_cents: number }
}

const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer<Database, OrderEvents>({
  db,
  secret: process.env.OUTBOX_SECRET,
  // Optional, checked at run time: a payload that fails is answered 422 invalid_payload and recorded nowhere.
  schemas: {
    'order.created': z.object({ order_id: z.string().uuid(), total_cents: z.number().int().nonnegative() }),
  },
})

export const onOrderEvent = consumer.dedupe(async (event, trx) => {
  if (event.type === 'order.created') {
    // event.data is { order_id: string; total_cents: number } here, with no cast.
    const { order_id, total_cents } = event.data
    await trx.insertInto('orders').values({ id: order_id, status: 'created', total_cents }).execute()
  } else {
    await trx
      .updateTable('orders')
      .set({ status: 'cancelled' })
      .where('id', '=', event.data.order_id)
      .execute()
  }
})
// #endregion consumer-typed
