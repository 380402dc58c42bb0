import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { deadLetterHead } from '../src/sql/dead-letter-head.js'
import { markSentAndRelease } from '../src/sql/mark-sent.js'
import { parkLane } from '../src/sql/park-lane.js'
import { scheduleRetry } from '../src/sql/schedule-retry.js'
import { selectLaneEvents } from '../src/sql/select-lane-events.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

async function laneRow(id: string) {
  return await t.db
    .selectFrom('outbox_lane')
    .selectAll()
    .where('aggregate_id', '=', id)
    .executeTakeFirstOrThrow()
}

describe('claims, leases and fencing', () => {
  it('two workers never claim the same lane; a lane is claimable again only after its lease expires', async () => {
    await seedEvents(t.db, ['f-1'], 3)
    const [first, second] = [t.connect({ max: 2 }), t.connect({ max: 2 })]
    const [a, b] = await Promise.all([
      claimLanes(first, 'public', 10, 60_000, 256),
      claimLanes(second, 'public', 10, 60_000, 256),
    ])
    expect([...a, ...b].filter((lane) => lane.aggregate_id === 'f-1')).toHaveLength(1)
    expect(await claimLanes(t.db, 'public', 10, 60_000, 256)).toEqual([])
    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second' WHERE aggregate_id = 'f-1'`.execute(
      t.db,
    )
    const [takeover] = await claimLanes(t.db, 'public', 10, 60_000, 256)
    expect(takeover).toMatchObject({ aggregate_id: 'f-1', taken_over: true })
  })

  it("after a takeover, the late worker's marks, releases, retries, parks and dead letters change nothing", async () => {
    await seedEvents(t.db, ['f-2'], 2)
    const [late] = await claimLanes(t.db, 'public', 1, 60_000, 256)
    const events = await selectLaneEvents(t.db, 'public', [late!.claim_token], 10)
    expect(events.map((event) => Number(event.sequence))).toEqual([1, 2])
    // The late worker hangs; its lease expires and a new worker takes the lane over.
    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second' WHERE aggregate_id = 'f-2'`.execute(
      t.db,
    )
    const [owner] = await claimLanes(t.db, 'public', 1, 60_000, 256)
    expect(owner!.claim_token).not.toBe(late!.claim_token)

    const now = new Date()
    const staleMark = {
      id: events[0]!.id,
      claimToken: late!.claim_token,
      httpStatus: 200,
      deliveryStatus: 'applied',
      attemptedAt: now,
    }
    expect(
      await markSentAndRelease(
        t.db,
        'public',
        [staleMark],
        [{ claimToken: late!.claim_token, delivered: true }],
      ),
    ).toEqual({
      marked: 0,
      released: 0,
    })
    const failure = {
      claimToken: late!.claim_token,
      id: events[0]!.id,
      attempts: 5,
      httpStatus: 500,
      error: 'late',
      attemptedAt: now,
    }
    expect(await scheduleRetry(t.db, 'public', failure, 60_000)).toBe(false)
    expect(await deadLetterHead(t.db, 'public', failure, 'block')).toBe(false)
    expect(
      await parkLane(
        t.db,
        'public',
        { claimToken: late!.claim_token, id: events[0]!.id, error: 'late', attemptedAt: now },
        60_000,
      ),
    ).toBe(false)

    const rows = await t.db
      .selectFrom('outbox')
      .selectAll()
      .where('aggregate_id', '=', 'f-2')
      .orderBy('sequence')
      .execute()
    expect(rows.map((row) => [row.status, row.attempts, row.last_error])).toEqual([
      ['pending', 0, null],
      ['pending', 0, null],
    ])
    expect(await laneRow('f-2')).toMatchObject({
      claim_token: owner!.claim_token,
      blocked_reason: null,
      conflict_count: 0,
    })

    // The owner's own writes do apply.
    const ownMark = { ...staleMark, claimToken: owner!.claim_token }
    expect(
      await markSentAndRelease(
        t.db,
        'public',
        [ownMark],
        [{ claimToken: owner!.claim_token, delivered: true }],
      ),
    ).toEqual({
      marked: 1,
      released: 1,
    })
    expect(await laneRow('f-2')).toMatchObject({ claim_token: null, leased_until: null })
  })
})
