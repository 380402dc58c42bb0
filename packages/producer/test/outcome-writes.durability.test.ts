import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { systemClock } from '../src/runtime.js'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { deadLetterHead } from '../src/sql/dead-letter-head.js'
import { markSentAndRelease } from '../src/sql/mark-sent.js'
import { parkLane } from '../src/sql/park-lane.js'
import { scheduleRetry } from '../src/sql/schedule-retry.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

/**
 * Runs one outcome write inside a transaction and says what `synchronous_commit` that transaction would commit
 * with: each write sets it for its own transaction only, so a write run alone (as the relay runs it) commits so.
 */
async function commitsWith(write: (db: Kysely<any>) => Promise<unknown>): Promise<string> {
  return await t.db.transaction().execute(async (trx) => {
    // The test server runs with synchronous_commit off (speed); a production server's default is on.
    await sql`SET LOCAL synchronous_commit = on`.execute(trx)
    await write(trx)
    const { rows } = await sql<{
      setting: string
    }>`SELECT current_setting('synchronous_commit') AS setting`.execute(trx)
    return rows[0]!.setting
  })
}

describe('what each outcome write waits for at commit', () => {
  it("a retry's schedule and a 409 park commit without waiting for the WAL flush; marks and dead letters wait", async () => {
    await seedEvents(t.db, ['d-1', 'd-2', 'd-3', 'd-4'], 1)
    const { lanes } = await claimLanes(
      { db: t.db, schema: 'public' },
      { lanes: 4, leaseMs: 60_000, scanRows: 256, batchSize: 10, maxBytes: 1 << 30, clock: systemClock },
    )
    const byId = new Map(lanes.map((lane) => [lane.aggregateId, lane]))
    const failureOf = (id: string) => {
      const lane = byId.get(id)!
      return {
        claimToken: lane.claimToken,
        id: lane.events[0]!.id,
        attempts: 1,
        httpStatus: 500,
        error: 'HTTP 500',
        attemptedAt: new Date(),
      }
    }
    const ctx = (db: Kysely<any>) => ({ db, schema: 'public' })
    expect(
      await commitsWith((db) => scheduleRetry(ctx(db), { failure: failureOf('d-1'), delayMs: 1000 })),
    ).toBe('off')
    expect(
      await commitsWith((db) =>
        parkLane(ctx(db), {
          claimToken: byId.get('d-2')!.claimToken,
          id: byId.get('d-2')!.events[0]!.id,
          error: 'HTTP 409',
          attemptedAt: new Date(),
          delayMs: 1000,
        }),
      ),
    ).toBe('off')
    expect(
      await commitsWith((db) => deadLetterHead(ctx(db), { failure: failureOf('d-3'), onExhausted: 'skip' })),
    ).toBe('on')
    const d4 = byId.get('d-4')!
    expect(
      await commitsWith((db) =>
        markSentAndRelease(ctx(db), {
          marks: [
            {
              id: d4.events[0]!.id,
              claimToken: d4.claimToken,
              httpStatus: 200,
              deliveryStatus: 'applied',
              attemptedAt: new Date(),
            },
          ],
          releases: [{ claimToken: d4.claimToken, delivered: true }],
        }),
      ),
    ).toBe('on')
    // Each write did its work: the settings changed nothing but the wait.
    const rows = await t.db
      .selectFrom('outbox')
      .select(['aggregate_id', 'status', 'attempts', 'last_status'])
      .orderBy('aggregate_id')
      .execute()
    expect(rows).toEqual([
      { aggregate_id: 'd-1', status: 'pending', attempts: 1, last_status: 500 },
      { aggregate_id: 'd-2', status: 'pending', attempts: 0, last_status: 409 },
      { aggregate_id: 'd-3', status: 'dead', attempts: 1, last_status: 500 },
      { aggregate_id: 'd-4', status: 'sent', attempts: 1, last_status: 200 },
    ])
  })

  it('a session that asked for durable commits keeps them after a retry was scheduled on it', async () => {
    await seedEvents(t.db, ['s-1'], 1)
    const db = t.connect({ max: 1 })
    try {
      await sql`SET synchronous_commit = on`.execute(db)
      const { lanes } = await claimLanes(
        { db, schema: 'public' },
        { lanes: 1, leaseMs: 60_000, scanRows: 256, batchSize: 10, maxBytes: 1 << 30, clock: systemClock },
      )
      const lane = lanes[0]!
      await scheduleRetry(
        { db, schema: 'public' },
        {
          failure: {
            claimToken: lane.claimToken,
            id: lane.events[0]!.id,
            attempts: 1,
            httpStatus: 503,
            error: 'HTTP 503',
            attemptedAt: new Date(),
          },
          delayMs: 0,
        },
      )
      const { rows } = await sql<{
        setting: string
      }>`SELECT current_setting('synchronous_commit') AS setting`.execute(db)
      expect(rows[0]!.setting).toBe('on')
    } finally {
      await db.destroy()
    }
  })
})
