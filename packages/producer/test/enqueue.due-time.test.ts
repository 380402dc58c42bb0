import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { type EnqueueInput, enqueue, enqueueMany } from '../src/index.js'

const t = useTestDatabase()

const eventFor = (aggregateId: string): EnqueueInput => ({
  aggregateType: 'order',
  aggregateId,
  eventType: 'order.updated',
  payload: {},
})

const enqueueOne = (aggregateId: string) =>
  t.db.transaction().execute((trx) => enqueue(trx, eventFor(aggregateId)))

async function dueTimes(aggregateId: string): Promise<{ sequence: string; available_at: Date | number }[]> {
  const { rows } = await sql<{ sequence: string; available_at: Date | number }>`
    SELECT sequence, available_at
    FROM outbox WHERE aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  return rows
}

async function laneCount(aggregateId: string): Promise<number> {
  const { rows } = await sql<{
    n: string
  }>`SELECT count(*) AS n FROM outbox_lane WHERE aggregate_id = ${aggregateId}`.execute(t.db)
  return Number(rows[0]!.n)
}

describe('enqueue: the due time of a row joining its lane', () => {
  it('makes a first event due at once and creates its lane row', async () => {
    const before = Date.now()
    await enqueueOne('first')
    const [row] = await dueTimes('first')
    expect(new Date(row!.available_at).getTime()).toBeGreaterThanOrEqual(before - 1000)
    expect(new Date(row!.available_at).getTime()).toBeLessThanOrEqual(Date.now() + 1000)
    expect(await laneCount('first')).toBe(1)
  })

  it('does not make a row behind a head in backoff look due', async () => {
    await enqueueOne('backoff')
    await sql`UPDATE outbox SET available_at = now() + interval '1 hour' WHERE aggregate_id = 'backoff'`.execute(
      t.db,
    )
    await enqueueOne('backoff')
    const [head, next] = await dueTimes('backoff')
    expect(new Date(next!.available_at).getTime()).toBe(new Date(head!.available_at).getTime())
    expect(new Date(next!.available_at).getTime()).toBeGreaterThan(Date.now() + 30 * 60_000)
  })

  it("keeps a row out of the due index while its lane is parked as 'exhausted', for enqueue and enqueueMany", async () => {
    await enqueueOne('parked')
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE aggregate_id = 'parked'`.execute(
      t.db,
    )
    await enqueueOne('parked')
    await t.db.transaction().execute((trx) => enqueueMany(trx, [eventFor('parked')]))
    expect((await dueTimes('parked')).map((row) => row.available_at).slice(1)).toEqual([Infinity, Infinity])
  })

  it('recreates a missing lane row for an aggregate that already has events, so the relay can still claim them', async () => {
    await enqueueOne('lost-lane')
    await sql`DELETE FROM outbox_lane WHERE aggregate_id = 'lost-lane'`.execute(t.db)
    const { sequence } = await enqueueOne('lost-lane')
    expect(sequence).toBe(2)
    expect(await laneCount('lost-lane')).toBe(1)
  })

  it('follows a first event written by enqueueMany (its counter row already exists)', async () => {
    await t.db.transaction().execute((trx) => enqueueMany(trx, [eventFor('many'), eventFor('many')]))
    await sql`UPDATE outbox SET available_at = now() + interval '1 hour' WHERE aggregate_id = 'many'`.execute(
      t.db,
    )
    const { sequence } = await enqueueOne('many')
    expect(sequence).toBe(3)
    const rows = await dueTimes('many')
    expect(new Date(rows[2]!.available_at).getTime()).toBe(new Date(rows[1]!.available_at).getTime())
  })
})
