import { setTimeout as sleep } from 'node:timers/promises'
import { useTestDatabase } from '@outbox/test-harness'
import { type ControlledTransaction, type Kysely, sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { type EnqueueInput, enqueue } from '../src/index.js'

const t = useTestDatabase()

const eventFor = (aggregateId: string, tag: string): EnqueueInput => ({
  aggregateType: 'order',
  aggregateId,
  eventType: 'order.updated',
  payload: { tag },
})

async function backendPid(trx: ControlledTransaction<any>): Promise<number> {
  const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx)
  return rows[0]!.pid
}

/** Polls until `waiter` is blocked by `holder` on a lock, as PostgreSQL itself reports it. */
async function waitUntilBlockedBy(db: Kysely<any>, waiter: number, holder: number): Promise<void> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const { rows } = await sql<{
      blockers: number[]
    }>`SELECT pg_blocking_pids(${waiter}) AS blockers`.execute(db)
    if (rows[0]!.blockers.includes(holder)) return
    if (Date.now() > deadline) throw new Error(`backend ${waiter} never waited on backend ${holder}`)
    await sleep(5)
  }
}

/** Settles with 'timeout' if `promise` has not settled within `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  return Promise.race([promise, sleep(ms).then(() => 'timeout' as const)])
}

async function sequencesOf(aggregateId: string): Promise<{ sequence: number; tag: string }[]> {
  const rows = await t.db
    .selectFrom('outbox')
    .select(['sequence', 'payload'])
    .where('aggregate_type', '=', 'order')
    .where('aggregate_id', '=', aggregateId)
    .orderBy('sequence')
    .execute()
  return rows.map((row) => ({ sequence: Number(row.sequence), tag: (row.payload as { tag: string }).tag }))
}

describe('enqueue: sequence order is commit order', () => {
  it('a second writer of the same aggregate waits for the first to commit, then gets the next sequence', async () => {
    const t1 = await t.db.startTransaction().execute()
    const t2 = await t.db.startTransaction().execute()
    const [pid1, pid2] = [await backendPid(t1), await backendPid(t2)]
    const first = await enqueue(t1, eventFor('X', 't1'))
    expect(first.sequence).toBe(1)

    const order: string[] = []
    const second = enqueue(t2, eventFor('X', 't2')).then((result) => {
      order.push('t2 enqueued')
      return result
    })
    await waitUntilBlockedBy(t.db, pid2, pid1)
    expect(await within(second, 100)).toBe('timeout')
    expect(order).toEqual([])

    // Marked before the COMMIT is sent: its reply and t2's, on two connections, may be handled in either order.
    order.push('t1 commits')
    await t1.commit().execute()
    expect((await second).sequence).toBe(2)
    expect(order).toEqual(['t1 commits', 't2 enqueued'])
    await t2.commit().execute()
    expect(await sequencesOf('X')).toEqual([
      { sequence: 1, tag: 't1' },
      { sequence: 2, tag: 't2' },
    ])
  })

  it('a writer of another aggregate never waits on an open transaction', async () => {
    const t1 = await t.db.startTransaction().execute()
    await enqueue(t1, eventFor('X2', 't1'))
    try {
      const t3 = await t.db.startTransaction().execute()
      const third = await within(enqueue(t3, eventFor('Y2', 't3')), 5_000)
      expect(third).toMatchObject({ sequence: 1 })
      expect(await within(t3.commit().execute(), 5_000)).not.toBe('timeout')
      // T1 is still open and holding X2: T3's event is already committed and visible.
      expect(await sequencesOf('Y2')).toEqual([{ sequence: 1, tag: 't3' }])
      expect(await sequencesOf('X2')).toEqual([])
    } finally {
      await t1.commit().execute()
    }
    expect(await sequencesOf('X2')).toEqual([{ sequence: 1, tag: 't1' }])
  })

  it('a rolled-back writer leaves no gap: the waiter takes its sequence', async () => {
    const t1 = await t.db.startTransaction().execute()
    const t2 = await t.db.startTransaction().execute()
    const [pid1, pid2] = [await backendPid(t1), await backendPid(t2)]
    expect((await enqueue(t1, eventFor('X3', 'before'))).sequence).toBe(1)
    await t1.commit().execute()

    const t1b = await t.db.startTransaction().execute()
    const pid1b = await backendPid(t1b)
    expect((await enqueue(t1b, eventFor('X3', 'rolled back'))).sequence).toBe(2)
    const second = enqueue(t2, eventFor('X3', 'after'))
    await waitUntilBlockedBy(t.db, pid2, pid1b)
    await t1b.rollback().execute()
    expect((await second).sequence).toBe(2)
    await t2.commit().execute()
    expect(pid1).not.toBe(pid2)
    expect(await sequencesOf('X3')).toEqual([
      { sequence: 1, tag: 'before' },
      { sequence: 2, tag: 'after' },
    ])
  })

  it('50 concurrent writers with random commit delays get sequences 1..50 in commit order, rollbacks leaving no gap', async () => {
    const db = t.connect({ max: 24 })
    // The order in which each writer's enqueue returned = the order in which it got the counter row's lock, which
    // the previous holder releases only by committing (or rolling back). The app-side order of COMMIT replies is
    // not used: on a loaded machine the event loop may handle two replies in either order.
    const acquired: string[] = []
    const committed = new Set<string>()
    const writers = Array.from({ length: 60 }, (_, index) => ({
      tag: `w${index}`,
      // Every sixth writer rolls back after taking a sequence: 10 rollbacks, 50 commits.
      rollback: index % 6 === 5,
    }))
    await Promise.all(
      writers.map(async ({ tag, rollback }) => {
        await sleep(Math.random() * 20)
        const trx = await db.startTransaction().execute()
        try {
          await enqueue(trx, eventFor('X50', tag))
          acquired.push(tag)
          await sleep(1 + Math.random() * 8)
          if (rollback) {
            await trx.rollback().execute()
          } else {
            await trx.commit().execute()
            committed.add(tag)
          }
        } catch (error) {
          await trx.rollback().execute()
          throw error
        }
      }),
    )
    const rows = await sequencesOf('X50')
    expect(committed.size).toBe(50)
    expect(rows.map((row) => row.sequence)).toEqual(Array.from({ length: 50 }, (_, index) => index + 1))
    // Each committed writer got the next sequence in lock order; a rolled-back writer's turn left no number behind.
    expect(rows.map((row) => row.tag)).toEqual(acquired.filter((tag) => committed.has(tag)))
    const counter = await t.db
      .selectFrom('outbox_counter')
      .select('last_sequence')
      .where('aggregate_id', '=', 'X50')
      .executeTakeFirstOrThrow()
    expect(Number(counter.last_sequence)).toBe(50)
  })
})
