import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { enqueue } from '../src/index.js'

const t = useTestDatabase()

describe('enqueue atomicity', () => {
  beforeAll(async () => {
    await sql`CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`.execute(t.db)
  })

  it('commits the event with the business row', async () => {
    const result = await t.db.transaction().execute(async (trx) => {
      await trx.insertInto('orders').values({ id: 'a1', status: 'created' }).execute()
      return await enqueue(trx, {
        aggregateType: 'order',
        aggregateId: 'a1',
        eventType: 'order.created',
        payload: { id: 'a1' },
      })
    })
    expect(result.sequence).toBe(1)
    const rows = await t.db.selectFrom('outbox').selectAll().where('event_id', '=', result.eventId).execute()
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      aggregate_type: 'order',
      aggregate_id: 'a1',
      event_type: 'order.created',
      status: 'pending',
      payload: { id: 'a1' },
    })
  })

  it('a business write and its enqueue rolled back together leave neither row', async () => {
    await expect(
      t.db.transaction().execute(async (trx) => {
        await trx.insertInto('orders').values({ id: 'r1', status: 'created' }).execute()
        await enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'r1',
          eventType: 'order.created',
          payload: {},
        })
        throw new Error('boom after enqueue')
      }),
    ).rejects.toThrow('boom after enqueue')
    expect(await t.db.selectFrom('orders').selectAll().where('id', '=', 'r1').execute()).toEqual([])
    expect(await t.db.selectFrom('outbox').selectAll().where('aggregate_id', '=', 'r1').execute()).toEqual([])
  })
})
