import { setTimeout as sleep } from 'node:timers/promises'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { type EnqueueInput, enqueue, enqueueMany } from '../src/index.js'

const t = useTestDatabase()

const ev = (aggregateType: string, aggregateId: string, tag: string): EnqueueInput => ({
  aggregateType,
  aggregateId,
  eventType: `${aggregateType}.changed`,
  payload: { tag },
})

describe('enqueueMany', () => {
  it('returns ids and sequences in input order, consecutive per aggregate in the order given', async () => {
    const input = [
      ev('order', 'A', 'a1'),
      ev('customer', 'A', 'c1'),
      ev('order', 'B', 'b1'),
      ev('order', 'A', 'a2'),
      ev('customer', 'A', 'c2'),
      ev('order', 'A', 'a3'),
    ]
    const first = await t.db.transaction().execute((trx) => enqueueMany(trx, input))
    expect(first.map((result) => result.sequence)).toEqual([1, 1, 1, 2, 2, 3])
    expect(new Set(first.map((result) => result.eventId)).size).toBe(input.length)

    // A later single enqueue continues the same counters.
    const next = await t.db.transaction().execute((trx) => enqueue(trx, ev('order', 'A', 'a4')))
    expect(next.sequence).toBe(4)
    const again = await t.db
      .transaction()
      .execute((trx) => enqueueMany(trx, [ev('order', 'B', 'b2'), ev('order', 'A', 'a5')]))
    expect(again.map((result) => result.sequence)).toEqual([2, 5])

    const rows = await t.db
      .selectFrom('outbox')
      .select(['event_id', 'aggregate_type', 'aggregate_id', 'sequence', 'event_type', 'payload', 'status'])
      .execute()
    const byId = new Map(rows.map((row) => [row.event_id, row]))
    input.forEach((event, index) => {
      const row = byId.get(first[index]!.eventId)
      expect(row).toMatchObject({
        aggregate_type: event.aggregateType,
        aggregate_id: event.aggregateId,
        sequence: String(first[index]!.sequence),
        event_type: event.eventType,
        payload: event.payload,
        status: 'pending',
      })
    })
    const lanes = await t.db.selectFrom('outbox_lane').select(['aggregate_type', 'aggregate_id']).execute()
    expect(lanes.map((lane) => `${lane.aggregate_type}/${lane.aggregate_id}`).sort()).toEqual([
      'customer/A',
      'order/A',
      'order/B',
    ])
  })

  it('an empty list writes nothing', async () => {
    const before = await t.db
      .selectFrom('outbox')
      .select(sql<string>`count(*)`.as('n'))
      .executeTakeFirstOrThrow()
    expect(await t.db.transaction().execute((trx) => enqueueMany(trx, []))).toEqual([])
    const after = await t.db
      .selectFrom('outbox')
      .select(sql<string>`count(*)`.as('n'))
      .executeTakeFirstOrThrow()
    expect(after.n).toBe(before.n)
  })

  it('opposite-order calls across two aggregates, many at once, never deadlock and keep both sequences gapless', async () => {
    const db = t.connect({ max: 16 })
    const rounds = 40
    const forward = [ev('order', 'P', 'forward'), ev('order', 'Q', 'forward')]
    const backward = [ev('order', 'Q', 'backward'), ev('order', 'P', 'backward')]
    // PostgreSQL breaks a deadlock after deadlock_timeout (1 s) by failing one transaction with 40P01; the first
    // such failure fails the test at once.
    await Promise.all(
      Array.from({ length: rounds * 2 }, async (_, index) => {
        await sleep(Math.random() * 5)
        return await db.transaction().execute(async (trx) => {
          const enqueued = await enqueueMany(trx, index % 2 === 0 ? forward : backward)
          // Hold the locks a little, so the other direction really arrives while they are held.
          await sleep(Math.random() * 3)
          return enqueued
        })
      }),
    )
    for (const aggregateId of ['P', 'Q']) {
      const rows = await t.db
        .selectFrom('outbox')
        .select('sequence')
        .where('aggregate_id', '=', aggregateId)
        .orderBy('sequence')
        .execute()
      expect(rows.map((row) => Number(row.sequence))).toEqual(
        Array.from({ length: rounds * 2 }, (_, i) => i + 1),
      )
    }
  })
})
