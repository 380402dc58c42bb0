import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type EnqueueInput, enqueue, enqueueMany, notifyChannel } from '../src/index.js'

const t = useTestDatabase()

const SENTINEL = 'outbox_test_sentinel'
const event = (aggregateId: string): EnqueueInput => ({
  aggregateType: 'order',
  aggregateId,
  eventType: 'order.created',
  payload: {},
})

let listener: pg.Client
const received: { channel: string; payload: string | undefined }[] = []
let sentinels = 0

beforeAll(async () => {
  listener = new pg.Client({ connectionString: t.url })
  await listener.connect()
  listener.on('notification', (message) => {
    received.push({ channel: message.channel, payload: message.payload })
  })
  await listener.query(`LISTEN ${notifyChannel()}`)
  await listener.query(`LISTEN ${SENTINEL}`)
})

afterAll(async () => {
  await listener?.end()
})

/**
 * Runs `act`, then sends a sentinel notification in its own transaction and waits for it. PostgreSQL delivers a
 * listener's notifications in commit order, so once the sentinel is in, every notification `act` caused is too:
 * "none arrived" is then a fact, not a guess about timing.
 */
async function outboxNotificationsOf(
  act: () => Promise<unknown>,
): Promise<{ channel: string; payload?: string }[]> {
  received.length = 0
  await act()
  const mark = `mark-${++sentinels}`
  const arrived = new Promise<void>((resolve) => {
    const check = (message: pg.Notification) => {
      if (message.channel === SENTINEL && message.payload === mark) {
        listener.off('notification', check)
        resolve()
      }
    }
    listener.on('notification', check)
  })
  await sql`SELECT pg_notify(${SENTINEL}, ${mark})`.execute(t.db)
  await arrived
  return received.filter((message) => message.channel !== SENTINEL)
}

describe('enqueue notifies the relay', () => {
  it('the channel is named after the schema', () => {
    expect(notifyChannel()).toBe('outbox_public')
    expect(notifyChannel('tenant_a')).toBe('outbox_tenant_a')
  })

  it('sends one notification, with a constant payload, per committed transaction', async () => {
    const got = await outboxNotificationsOf(async () => {
      await t.db.transaction().execute(async (trx) => {
        await enqueue(trx, event('1'))
        await enqueue(trx, event('2'))
        await enqueueMany(trx, [event('3'), event('1')])
      })
    })
    expect(got).toEqual([{ channel: 'outbox_public', payload: '' }])
  })

  it('sends one per transaction for several transactions', async () => {
    const got = await outboxNotificationsOf(async () => {
      for (const id of ['a', 'b', 'c']) await t.db.transaction().execute((trx) => enqueue(trx, event(id)))
      await t.db.transaction().execute((trx) => enqueueMany(trx, [event('a'), event('d')]))
    })
    expect(got).toHaveLength(4)
  })

  it('sends none when the transaction rolls back', async () => {
    const got = await outboxNotificationsOf(async () => {
      await t.db
        .transaction()
        .execute(async (trx) => {
          await enqueue(trx, event('rolled-back'))
          await enqueueMany(trx, [event('rolled-back-2')])
          throw new Error('roll back')
        })
        .catch(() => {})
    })
    expect(got).toEqual([])
  })

  it('sends none with notify: false, while the events are still written', async () => {
    const got = await outboxNotificationsOf(async () => {
      await t.db.transaction().execute(async (trx) => {
        await enqueue(trx, event('quiet'), { notify: false })
        await enqueueMany(trx, [event('quiet-2')], { notify: false })
      })
    })
    expect(got).toEqual([])
    const rows = await t.db
      .selectFrom('outbox')
      .select('aggregate_id')
      .where('aggregate_id', 'like', 'quiet%')
      .execute()
    expect(rows).toHaveLength(2)
  })
})
