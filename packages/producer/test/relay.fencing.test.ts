import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { systemClock } from '../src/runtime.js'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { deadLetterHead } from '../src/sql/dead-letter-head.js'
import { markSentAndRelease } from '../src/sql/mark-sent.js'
import { parkLane } from '../src/sql/park-lane.js'
import { scheduleRetry } from '../src/sql/schedule-retry.js'
import { selectLaneEvents } from '../src/sql/select-lane-events.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

/** A claim as the relay makes it, with a budget too large to matter here. */
function claim(db: Kysely<any>, lanes: number, leaseMs: number, scanRows: number, batchSize: number) {
  return claimLanes(
    { db, schema: 'public' },
    { lanes, leaseMs, scanRows, batchSize, maxBytes: 1 << 30, clock: systemClock },
  )
}

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
    const [{ lanes: a }, { lanes: b }] = await Promise.all([
      claim(first, 10, 60_000, 256, 10),
      claim(second, 10, 60_000, 256, 10),
    ])
    expect([...a, ...b].filter((lane) => lane.aggregateId === 'f-1')).toHaveLength(1)
    expect(await claim(t.db, 10, 60_000, 256, 10)).toEqual({
      lanes: [],
      windowFull: false,
      budgetFull: false,
    })
    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second' WHERE aggregate_id = 'f-1'`.execute(
      t.db,
    )
    const {
      lanes: [takeover],
    } = await claim(t.db, 10, 60_000, 256, 10)
    expect(takeover).toMatchObject({ aggregateId: 'f-1', takenOver: true, charged: false })
  })

  it('a claim reads each lane from its head, at most batchSize rows in sequence order, under the lane token', async () => {
    await seedEvents(t.db, ['r-1', 'r-2'], 5)
    // r-1's first two rows were sent by an earlier owner: its head is sequence 3.
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE aggregate_id = 'r-1' AND sequence <= 2`.execute(
      t.db,
    )
    const { lanes: claimed } = await claim(t.db, 10, 60_000, 256, 2)
    const lanes = new Map(claimed.map((lane) => [lane.aggregateId, lane]))
    expect([...lanes.keys()].sort()).toEqual(['r-1', 'r-2'])
    for (const lane of claimed) {
      expect(lane.events.every((event) => event.aggregateId === lane.aggregateId)).toBe(true)
      expect(lane).toMatchObject({ takenOver: false, charged: false, watchStarts: false, conflictCount: 0 })
    }
    expect(lanes.get('r-1')!.events.map((event) => event.sequence)).toEqual([3, 4])
    expect(lanes.get('r-2')!.events.map((event) => event.sequence)).toEqual([1, 2])
    expect(lanes.get('r-2')!.events[0]).toMatchObject({
      eventType: 'order.updated',
      attempts: 0,
      failingMs: null,
    })
    expect(JSON.parse(lanes.get('r-2')!.events[0]!.payload)).toEqual({ id: 'r-2', n: 0 })
    // The next rows after a full batch, as a lane that reads on gets them.
    const r1 = lanes.get('r-1')!
    const next = await selectLaneEvents(
      { db: t.db, schema: 'public' },
      {
        claimToken: r1.claimToken,
        afterSequence: r1.events[1]!.sequence,
        batchSize: 2,
        maxBytes: 1 << 30,
      },
    )
    expect(next.map((event) => event.sequence)).toEqual([5])
  })

  it("after a takeover, the late worker's marks, releases, retries, parks and dead letters change nothing", async () => {
    await seedEvents(t.db, ['f-2'], 2)
    const {
      lanes: [late],
    } = await claim(t.db, 1, 60_000, 256, 10)
    const events = late!.events
    expect(events.map((event) => event.sequence)).toEqual([1, 2])
    // The late worker hangs; its lease expires and a new worker takes the lane over.
    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second' WHERE aggregate_id = 'f-2'`.execute(
      t.db,
    )
    const {
      lanes: [owner],
    } = await claim(t.db, 1, 60_000, 256, 10)
    expect(owner!.claimToken).not.toBe(late!.claimToken)
    expect(owner!.events.map((event) => event.id)).toEqual(events.map((event) => event.id))
    // Reading on past a batch is fenced too: the late worker's token reads nothing.
    expect(
      await selectLaneEvents(
        { db: t.db, schema: 'public' },
        {
          claimToken: late!.claimToken,
          afterSequence: 0,
          batchSize: 10,
          maxBytes: 1 << 30,
        },
      ),
    ).toEqual([])

    const now = new Date()
    const staleMark = {
      id: events[0]!.id,
      claimToken: late!.claimToken,
      httpStatus: 200,
      deliveryStatus: 'applied',
      attemptedAt: now,
    }
    expect(
      await markSentAndRelease(
        { db: t.db, schema: 'public' },
        {
          marks: [staleMark],
          releases: [{ claimToken: late!.claimToken, delivered: true }],
        },
      ),
    ).toEqual({
      marked: 0,
      released: 0,
      releasedWithWork: 0,
    })
    const failure = {
      claimToken: late!.claimToken,
      id: events[0]!.id,
      attempts: 5,
      httpStatus: 500,
      error: 'late',
      attemptedAt: now,
    }
    const sqlContext = { db: t.db, schema: 'public' }
    expect((await scheduleRetry(sqlContext, { failure, delayMs: 60_000 })).owned).toBe(false)
    expect((await deadLetterHead(sqlContext, { failure, onExhausted: 'block' })).owned).toBe(false)
    expect(
      await parkLane(sqlContext, {
        claimToken: late!.claimToken,
        id: events[0]!.id,
        error: 'late',
        attemptedAt: now,
        delayMs: 60_000,
      }),
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
      claim_token: owner!.claimToken,
      blocked_reason: null,
      conflict_count: 0,
    })

    // The owner's own writes do apply.
    const ownMark = { ...staleMark, claimToken: owner!.claimToken }
    expect(
      await markSentAndRelease(
        { db: t.db, schema: 'public' },
        {
          marks: [ownMark],
          releases: [{ claimToken: owner!.claimToken, delivered: true }],
        },
      ),
    ).toEqual({
      marked: 1,
      released: 1,
      // Sequence 2 is still pending: the lane is claimable at once.
      releasedWithWork: 1,
    })
    expect(await laneRow('f-2')).toMatchObject({ claim_token: null, leased_until: null })
  })

  it('a release says whether its lane has work left, counting rows marked in the same statement as done', async () => {
    await seedEvents(t.db, ['w-1', 'w-2'], 2)
    const { lanes: claimed } = await claim(t.db, 10, 60_000, 256, 10)
    const byId = new Map(claimed.map((lane) => [lane.aggregateId, lane]))
    const marksOf = (aggregateId: string, count: number) =>
      byId
        .get(aggregateId)!
        .events.slice(0, count)
        .map((event) => ({
          id: event.id,
          claimToken: byId.get(aggregateId)!.claimToken,
          httpStatus: 200,
          deliveryStatus: 'applied',
          attemptedAt: new Date(),
        }))
    // w-1: both rows marked in this very statement, so nothing is left; w-2: one of two, so its lane has work.
    const result = await markSentAndRelease(
      { db: t.db, schema: 'public' },
      {
        marks: [...marksOf('w-1', 2), ...marksOf('w-2', 1)],
        releases: ['w-1', 'w-2'].map((id) => ({ claimToken: byId.get(id)!.claimToken, delivered: true })),
      },
    )
    expect(result).toEqual({ marked: 3, released: 2, releasedWithWork: 1 })
  })

  it("leased lanes' rows do not use up a claim's scan window, whatever the statistics say about leases", async () => {
    // 300 lanes whose rows come first in due order, leased by another relay after the statistics were taken (as
    // leases come and go between analyzes); then 3 free lanes behind them. A window of 256 rows that counted the
    // leased lanes' rows would hold nothing claimable.
    const busy = Array.from({ length: 300 }, (_, n) => `busy-${n}`)
    await seedEvents(t.db, busy, 1)
    await sql`ANALYZE`.execute(t.db)
    // Lease every claimable lane (earlier tests in this file left some behind).
    const { lanes: leased } = await claim(t.db, 1000, 60_000, 8000, 10)
    expect(leased.filter((lane) => lane.aggregateId.startsWith('busy-'))).toHaveLength(300)
    await seedEvents(t.db, ['free-1', 'free-2', 'free-3'], 1)
    const { lanes, windowFull } = await claim(t.db, 10, 60_000, 256, 10)
    expect(lanes.map((lane) => lane.aggregateId).sort()).toEqual(['free-1', 'free-2', 'free-3'])
    expect(windowFull).toBe(false)
  })
})
