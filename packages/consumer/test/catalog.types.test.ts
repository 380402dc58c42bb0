// Compile-time checks of the typed catalog on the consumer side; `tsc -p tsconfig.test.json` is what judges them.
// Every `@ts-expect-error` must meet an error: if a refactor made the wrong code compile, tsc reports the unused
// directive and the check fails.
import type { IncomingMessage } from 'node:http'
import type { EventCatalog, JsonValue, OutboxEvent, ReceivedEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import Fastify, { type FastifyRequest } from 'fastify'
import type { Kysely, Transaction } from 'kysely'
import { beforeAll, describe, expect, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import { outboxWebhooks } from '../src/fastify.js'
import {
  createConsumer,
  type EnvelopeReader,
  type ExpressRequest,
  type HandlerEvent,
  type PayloadSchemas,
  type WebhookRequest,
} from '../src/index.js'

interface OrderEvents extends EventCatalog {
  'order.created': { order_id: string; total_cents: number }
  'order.cancelled': { order_id: string; reason: string }
}

interface Db {
  orders: { id: string; status: string; total_cents: number }
}

// The consumers below are only built (no request reaches them): the tables of Db need not exist.
const t = useTestDatabase()
let db: Kysely<Db>
beforeAll(() => {
  db = t.db as Kysely<Db>
})
const allowUnsigned = true

describe('createConsumer<DB, Catalog>: event.data narrows by event.type', () => {
  it('in every adapter, with no cast', () => {
    const consumer = createConsumer<Db, OrderEvents>({ db, allowUnsigned })
    const onEvent = async (event: HandlerEvent<OrderEvents>, trx: Transaction<Db>): Promise<void> => {
      if (event.type === 'order.created') {
        expectTypeOf(event.data).toEqualTypeOf<{ order_id: string; total_cents: number }>()
        await trx
          .insertInto('orders')
          .values({ id: event.data.order_id, status: 'created', total_cents: event.data.total_cents })
          .execute()
      } else {
        expectTypeOf(event.type).toEqualTypeOf<'order.cancelled'>()
        expectTypeOf(event.data).toEqualTypeOf<{ order_id: string; reason: string }>()
        await trx
          .updateTable('orders')
          .set({ status: 'cancelled' })
          .where('id', '=', event.data.order_id)
          .execute()
      }
    }
    consumer.dedupe(async (event, trx, req) => {
      expectTypeOf(req).toEqualTypeOf<ExpressRequest>()
      if (event.type === 'order.cancelled') expectTypeOf(event.data.reason).toBeString()
      await onEvent(event, trx)
    })
    consumer.handle(async (event, trx, req) => {
      expectTypeOf(req).toEqualTypeOf<WebhookRequest>()
      if (event.type === 'order.created') expectTypeOf(event.data.total_cents).toBeNumber()
      await onEvent(event, trx)
    })
    consumer.fetch(async (event, trx, req) => {
      expectTypeOf(req).toEqualTypeOf<Request>()
      await onEvent(event, trx)
    })
    consumer.node(async (event, trx, req) => {
      expectTypeOf(req).toEqualTypeOf<IncomingMessage>()
      await onEvent(event, trx)
    })
    expect(typeof consumer.node).toBe('function')
  })

  it('refuses, at compile time, a field the narrowed payload does not have and a type the catalog lacks', () => {
    const { dedupe } = createConsumer<Db, OrderEvents>({ db, allowUnsigned })
    dedupe(async (event) => {
      if (event.type === 'order.created') {
        // @ts-expect-error `reason` belongs to order.cancelled, not to order.created
        void event.data.reason
      }
      // @ts-expect-error before narrowing, `data` is either payload: `total_cents` is not on both
      void event.data.total_cents
      // @ts-expect-error 'order.shipped' is not in the catalog, so the comparison can never be true
      if (event.type === 'order.shipped') return
    })
    // @ts-expect-error a handler written for another payload does not fit the catalog's events
    dedupe(async (event: OutboxEvent<{ sku: string }>) => console.log(event.data.sku))
    expect(typeof dedupe).toBe('function')
  })

  it('narrows the same way in the Fastify plugin, registered with the catalog as a type argument', async () => {
    const consumer = createConsumer<Db, OrderEvents>({ db, allowUnsigned })
    const app = Fastify()
    await app.register(outboxWebhooks<Db, OrderEvents, 'outbox'>, {
      consumer,
      path: '/hooks',
      handler: async (event, trx, request) => {
        expectTypeOf(request).toEqualTypeOf<FastifyRequest>()
        if (event.type === 'order.created') {
          expectTypeOf(event.data).toEqualTypeOf<{ order_id: string; total_cents: number }>()
          await trx
            .insertInto('orders')
            .values({ id: event.data.order_id, status: 'created', total_cents: event.data.total_cents })
            .execute()
        } else {
          expectTypeOf(event.data.reason).toBeString()
        }
      },
    })
    // Registered without type arguments, the handler's parameters are still typed (never an implicit any).
    await app.register(outboxWebhooks, {
      consumer: createConsumer({ db, allowUnsigned }),
      path: '/untyped',
      handler: async (event, trx) => {
        expectTypeOf(event).toEqualTypeOf<OutboxEvent<any>>()
        expectTypeOf(trx).toEqualTypeOf<Transaction<any>>()
      },
    })
    await app.close()
  })

  it('types a custom envelope as ReceivedEvent, narrowing the same way', () => {
    const envelope: EnvelopeReader = () => ({ eventId: 'evt_1', type: 'order.created', data: {} })
    const { fetch } = createConsumer<Db, OrderEvents>({ db, verify: () => true, envelope })
    fetch(async (event) => {
      expectTypeOf(event.sequence).toEqualTypeOf<number | undefined>()
      if (event.type === 'order.cancelled') {
        expectTypeOf(event).toMatchTypeOf<ReceivedEvent<{ order_id: string; reason: string }>>()
      }
    })
    expect(typeof fetch).toBe('function')
  })

  it('types `schemas` by the catalog: the output of each schema must be its payload', () => {
    const schemas: PayloadSchemas<OrderEvents> = {
      'order.created': z.object({ order_id: z.string(), total_cents: z.number().int() }),
    }
    createConsumer<Db, OrderEvents>({ db, allowUnsigned, schemas })
    createConsumer<Db, OrderEvents>({
      db,
      allowUnsigned,
      // @ts-expect-error the schema's output lacks `total_cents`, which handlers of order.created rely on
      schemas: { 'order.created': z.object({ order_id: z.string() }) },
    })
    createConsumer<Db, OrderEvents>({
      db,
      allowUnsigned,
      // @ts-expect-error 'order.shipped' is not an event type of the catalog
      schemas: { 'order.shipped': z.object({ order_id: z.string() }) },
    })
    expect(Object.keys(schemas)).toEqual(['order.created'])
  })
})

describe('without a catalog, the single-type generics keep working', () => {
  it('dedupe<TData> and friends type data as given; the default is JsonValue', () => {
    const { dedupe, handle, node } = createConsumer({ db, allowUnsigned })
    dedupe<{ order_id: string }>(async (event) => {
      expectTypeOf(event).toEqualTypeOf<OutboxEvent<{ order_id: string }>>()
    })
    handle(async (event) => {
      expectTypeOf(event).toEqualTypeOf<OutboxEvent<JsonValue>>()
    })
    node<{ n: number }>(async (event) => {
      // @ts-expect-error `n` is a number
      event.data.n.toUpperCase()
    })
    // Untyped `schemas` take any Standard Schema under any event type.
    createConsumer({ db, allowUnsigned, schemas: { anything: z.string() } })
    expect(typeof node).toBe('function')
  })
})
