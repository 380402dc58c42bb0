// enqueue under an event catalog. The compile-time half is judged by `tsc -p tsconfig.test.json`: every
// `@ts-expect-error` must meet an error, so a change that let a mismatched payload compile fails the check. The
// run-time half enqueues the typed events for real and reads them back.
import type { EventCatalog, JsonValue } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import type { Transaction } from 'kysely'
import { describe, expect, expectTypeOf, it } from 'vitest'
import { type EnqueueInput, type EnqueueInputOf, enqueue, enqueueMany } from '../src/index.js'

const t = useTestDatabase()

interface OrderEvents extends EventCatalog {
  'order.created': { order_id: string; total_cents: number }
  'order.cancelled': { order_id: string; reason: string }
}

describe('enqueue<Catalog>: the payload must fit its eventType', () => {
  it('compiles and writes events whose payloads fit, one by one and several at once', async () => {
    const written = await t.db.transaction().execute(async (trx) => {
      const created = await enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: '42',
        eventType: 'order.created',
        payload: { order_id: '42', total_cents: 4200 },
      })
      const many = await enqueueMany<OrderEvents>(trx, [
        {
          aggregateType: 'order',
          aggregateId: '42',
          eventType: 'order.cancelled',
          payload: { order_id: '42', reason: 'paid twice' },
        },
        {
          aggregateType: 'order',
          aggregateId: '43',
          eventType: 'order.created',
          payload: { order_id: '43', total_cents: 1 },
        },
      ])
      return [created, ...many]
    })
    expect(written.map((event) => event.sequence)).toEqual([1, 2, 1])
    const rows = await t.db
      .selectFrom('outbox')
      .select(['event_type', 'payload'])
      .where('aggregate_id', 'in', ['42', '43'])
      .orderBy('aggregate_id')
      .orderBy('sequence')
      .execute()
    expect(rows).toEqual([
      { event_type: 'order.created', payload: { order_id: '42', total_cents: 4200 } },
      { event_type: 'order.cancelled', payload: { order_id: '42', reason: 'paid twice' } },
      { event_type: 'order.created', payload: { order_id: '43', total_cents: 1 } },
    ])
  })

  it('does not compile a payload of another event type, a missing field or an event type the catalog lacks', () => {
    // tsc reports a refused overloaded call at the call or at the property it blames; each directive stands there.
    const calls = (trx: Transaction<any>) => [
      // @ts-expect-error an order.cancelled payload under eventType 'order.created'
      enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: '42',
        eventType: 'order.created',
        payload: { order_id: '42', reason: 'wrong type' },
      }),
      // @ts-expect-error `total_cents` is missing
      enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: '42',
        eventType: 'order.created',
        payload: { order_id: '42' },
      }),
      enqueue<OrderEvents>(trx, {
        aggregateType: 'order',
        aggregateId: '42',
        eventType: 'order.shipped',
        // @ts-expect-error 'order.shipped' is not in the catalog (no overload fits; tsc points at the payload)
        payload: { order_id: '42' },
      }),
      // @ts-expect-error in a batch, each event is checked against its own type
      enqueueMany<OrderEvents>(trx, [
        {
          aggregateType: 'order',
          aggregateId: '42',
          eventType: 'order.cancelled',
          payload: { order_id: '42', total_cents: 1 },
        },
      ]),
    ]
    expect(typeof calls).toBe('function')
  })

  it('EnqueueInputOf is the union of the catalog’s inputs; for an untyped catalog, any JSON payload', () => {
    expectTypeOf<EnqueueInputOf<OrderEvents>>().toEqualTypeOf<
      | EnqueueInput<{ order_id: string; total_cents: number }, 'order.created'>
      | EnqueueInput<{ order_id: string; reason: string }, 'order.cancelled'>
    >()
    expectTypeOf<EnqueueInputOf<EventCatalog & { [type: string]: JsonValue }>>().toEqualTypeOf<
      EnqueueInput<JsonValue>
    >()
  })
})

describe('without a catalog, the single-type generic and inference keep working', () => {
  it('compiles enqueue<TPayload>, an inferred payload and a batch of mixed payloads', async () => {
    await t.db.transaction().execute(async (trx) => {
      await enqueue<{ id: string }>(trx, {
        aggregateType: 'order',
        aggregateId: 'u1',
        eventType: 'order.placed',
        payload: { id: '1' },
      })
      await enqueue(trx, { aggregateType: 'order', aggregateId: 'u1', eventType: 'order.paid', payload: {} })
      await enqueueMany(trx, [
        { aggregateType: 'order', aggregateId: 'u2', eventType: 'order.paid', payload: {} },
        {
          aggregateType: 'customer',
          aggregateId: 'u7',
          eventType: 'customer.charged',
          payload: { cents: 1 },
        },
      ])
    })
    const calls = (trx: Transaction<any>) =>
      enqueue<{ id: string }>(trx, {
        aggregateType: 'order',
        aggregateId: 'u1',
        eventType: 'order.placed',
        // @ts-expect-error the single payload type still binds: `id` is a string
        payload: { id: 1 },
      })
    expect(typeof calls).toBe('function')
    const { count } = await t.db
      .selectFrom('outbox')
      .select((eb) => eb.fn.countAll<string>().as('count'))
      .where('aggregate_id', 'in', ['u1', 'u2', 'u7'])
      .executeTakeFirstOrThrow()
    expect(Number(count)).toBe(4)
  })
})
