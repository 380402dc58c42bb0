import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql, type Transaction } from 'kysely'
import { describe, expect, expectTypeOf, it } from 'vitest'
import { type EnqueueInput, enqueue, enqueueMany, OutboxError } from '../src/index.js'

const t = useTestDatabase()

const event: EnqueueInput<{ id: string }> = {
  aggregateType: 'order',
  aggregateId: '1',
  eventType: 'order.created',
  payload: { id: '1' },
}

async function outboxRowCount(): Promise<number> {
  const { rows } = await sql<{ n: string }>`SELECT count(*) AS n FROM outbox`.execute(t.db)
  return Number(rows[0]!.n)
}

describe('enqueue accepts only a transaction', () => {
  it('is a type error to pass a plain Kysely instance (checked by tsc over the tests)', () => {
    const db: Kysely<any> = t.db
    const calls = () => [
      // @ts-expect-error a plain Kysely instance would commit the event on its own: not a Transaction
      enqueue(db, event),
      // @ts-expect-error the same for several events
      enqueueMany(db, [event]),
    ]
    expect(typeof calls).toBe('function')
    expectTypeOf<Kysely<any>>().not.toMatchTypeOf<Parameters<typeof enqueue>[0]>()
    expectTypeOf<Transaction<any>>().toMatchTypeOf<Parameters<typeof enqueue>[0]>()
    // Through ReturnType: enqueue is overloaded (catalog and single payload type), which `.returns` cannot follow.
    expectTypeOf<Awaited<ReturnType<typeof enqueue>>>().toEqualTypeOf<{
      readonly eventId: string
      readonly sequence: number
    }>()
  })

  it('throws ERR_OUTBOX_NOT_A_TRANSACTION at run time and writes nothing', async () => {
    const notTransactions: unknown[] = [t.db, null, undefined, {}, { isTransaction: 'yes' }]
    for (const candidate of notTransactions) {
      for (const attempt of [
        () => enqueue(candidate as Transaction<any>, event),
        () => enqueueMany(candidate as Transaction<any>, [event]),
      ]) {
        const error = await attempt().then(
          () => undefined,
          (caught: unknown) => caught,
        )
        expect(error).toBeInstanceOf(OutboxError)
        expect(error).toMatchObject({
          code: 'ERR_OUTBOX_NOT_A_TRANSACTION',
          message: expect.stringContaining('db.transaction().execute'),
        })
      }
    }
    expect(await outboxRowCount()).toBe(0)
  })

  it('refuses a single connection that is not in a transaction', async () => {
    await expect(
      t.db.connection().execute((connection) => enqueue(connection as any, event)),
    ).rejects.toMatchObject({
      code: 'ERR_OUTBOX_NOT_A_TRANSACTION',
    })
    expect(await outboxRowCount()).toBe(0)
  })

  it('accepts a transaction from transaction().execute() and from startTransaction()', async () => {
    const first = await t.db.transaction().execute((trx) => enqueue(trx, event))
    const controlled = await t.db.startTransaction().execute()
    const second = await enqueue(controlled, event)
    await controlled.commit().execute()
    expect([first.sequence, second.sequence]).toEqual([1, 2])
    expect(await outboxRowCount()).toBe(2)
  })
})
