import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { checkIntegrity, listDeadLetters, prune, Relay, redrive, silentLogger, stats } from '../src/index.js'
import { redriveDead } from '../src/sql/redrive-dead.js'
import { laneRows, seedEvents, waitForLockWaiters } from './support.js'

const t = useTestDatabase()

/** Ages every dead letter of an aggregate by `days`, as if it had died that long ago. */
async function ageDeadLetters(aggregateId: string, days: number): Promise<void> {
  await sql`UPDATE outbox SET dead_at = dead_at - ${days} * interval '1 day'
    WHERE aggregate_id = ${aggregateId} AND status = 'dead'`.execute(t.db)
}

describe('prune never freezes a lane or loses an event', () => {
  it("keeps the dead letter that blocks its lane under 'block', however old; deletes older ones; the lane resumes on redrive", async () => {
    await seedEvents(t.db, ['frozen'], 4)
    // Sequence 1 dies under 'skip' (the lane moves on), then sequence 2 under 'block' (the lane stops behind it).
    const failing = new Set([1, 2])
    const sink = await startSink((request) =>
      failing.has(request.json.sequence) ? { status: 500 } : { status: 200, body: { status: 'applied' } },
    )
    try {
      const relay = (onExhausted: 'skip' | 'block') =>
        new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [], onExhausted, logger: silentLogger })
      await relay('skip').runOnce()
      await relay('block').runOnce()
      expect(await laneRows(t.db, 'frozen')).toEqual([
        [1, 'dead', false],
        [2, 'dead', false],
        [3, 'pending', true],
        [4, 'pending', true],
      ])
      await ageDeadLetters('frozen', 60)

      // The README's cron: both dead letters are past their retention; only the blocker is kept.
      const result = await prune(t.db, { retention: '7d', deadLetterRetention: '30d' })
      expect(result).toEqual({ removed: 1, dropped: 0, caughtUp: true })
      expect((await listDeadLetters(t.db)).map((dead) => dead.sequence)).toEqual([2])
      expect((await checkIntegrity(t.db)).violations).toEqual([])

      failing.clear()
      const [blocker] = await listDeadLetters(t.db)
      await redrive(t.db, { eventIds: [blocker!.eventId] })
      await relay('block').runOnce()
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 2, 3, 4])
      expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0, dead: 0 })
    } finally {
      await sink.close()
    }
  })

  it('never deletes an event a concurrent redrive put back to pending: every delete re-checks status and age', async () => {
    await seedEvents(t.db, ['revived'], 1)
    await sql`UPDATE outbox SET status = 'dead', attempts = 8, dead_at = now() - interval '90 days'
      WHERE aggregate_id = 'revived'`.execute(t.db)
    // The redrive holds its transaction open after reviving the row; the prune's DELETE picked the row while it
    // was still dead in its snapshot, and waits on its row lock.
    const held = await t.db.startTransaction().execute()
    expect(await redriveDead({ db: held, schema: 'public' }, { eventIds: 'all' })).toHaveLength(1)
    const pruning = prune(t.connect({ max: 1 }), { retention: '1d', deadLetterRetention: '1d' })
    await waitForLockWaiters(t.db)
    await held.commit().execute()
    expect(await pruning).toEqual({ removed: 0, dropped: 0, caughtUp: true })
    expect(await laneRows(t.db, 'revived')).toEqual([[1, 'pending', false]])
  })
})
