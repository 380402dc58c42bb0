import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  enqueue,
  listDeadLetters,
  type OnExhausted,
  Relay,
  redrive,
  silentLogger,
  stats,
} from '../src/index.js'
import { laneRows, seedEvents, waitForLockWaiters } from './support.js'

const t = useTestDatabase()

/** Sequences the sink fails with a 500; everything else is applied. */
const failing = new Set<number>()
let sink: Sink

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
  failing.clear()
  sink = await startSink((request) =>
    failing.has(request.json.sequence) ? { status: 500 } : { status: 200, body: { status: 'applied' } },
  )
})

afterEach(async () => {
  await sink.close()
})

/** One claim-and-deliver cycle of a relay that gives up at the first failure. */
async function deliverOnce(onExhausted: OnExhausted): Promise<void> {
  await new Relay({
    db: t.db,
    endpoint: sink.url,
    retrySchedule: [],
    onExhausted,
    logger: silentLogger,
  }).runOnce()
}

describe('redrive against a concurrent enqueue, and the lane it resumes', () => {
  it('waits for an open enqueue of a blocked aggregate, so the event it wrote behind the block is released too', async () => {
    await seedEvents(t.db, ['racing'], 2)
    failing.add(1)
    await deliverOnce('block')
    expect(await laneRows(t.db, 'racing')).toEqual([
      [1, 'dead', false],
      [2, 'pending', true],
    ])

    // An enqueue reads the lane as blocked and writes its event at 'infinity'; its transaction is still open
    // when the redrive runs. The redrive must not lift the block until that event is committed and visible.
    const open = await t.db.startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      aggregateId: 'racing',
      eventType: 'order.updated',
      payload: {},
    })
    const redriving = redrive(t.connect({ max: 1 }), { all: true })
    await waitForLockWaiters(t.db)
    await open.commit().execute()
    expect((await redriving).redriven).toHaveLength(1)

    expect(await laneRows(t.db, 'racing')).toEqual([
      [1, 'pending', false],
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    failing.clear()
    await deliverOnce('block')
    expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 1, 2, 3])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0 })
  })

  it('an older dead letter revived alone leaves the lane blocked by its blocker; reviving the blocker resumes it in order', async () => {
    await seedEvents(t.db, ['bent'], 4)
    failing.add(1)
    await deliverOnce('skip')
    failing.add(2)
    await deliverOnce('block')
    const [older, blocker] = await listDeadLetters(t.db)
    expect([older?.sequence, blocker?.sequence]).toEqual([1, 2])

    await redrive(t.db, { eventIds: [older!.eventId] })
    expect(await laneRows(t.db, 'bent')).toEqual([
      [1, 'pending', false],
      [2, 'dead', false],
      [3, 'pending', true],
      [4, 'pending', true],
    ])
    expect(await stats(t.db)).toMatchObject({ blocked: 1, dead: 1 })
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    failing.clear()
    await deliverOnce('block')
    // Nothing moved past the blocker: 'block' does not bend.
    expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2])
    // The relay's sweep of blocked lanes parks only what is behind the blocker: the revived event stays due.
    expect((await laneRows(t.db, 'bent'))[0]).toEqual([1, 'pending', false])

    await redrive(t.db, { eventIds: [blocker!.eventId] })
    await deliverOnce('block')
    expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 1, 2, 3, 4])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0, dead: 0 })
  })

  it('an enqueue open across the block leaves its event due in the blocked lane; the next relay pass parks it', async () => {
    await seedEvents(t.db, ['late'], 1)
    failing.add(1)
    // The enqueue reads the lane before the block (unblocked: its event is due) and commits after it, where the
    // block's own statement could not see the row.
    const open = await t.db.startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      aggregateId: 'late',
      eventType: 'order.updated',
      payload: {},
    })
    await deliverOnce('block')
    await open.commit().execute()
    expect(await laneRows(t.db, 'late')).toEqual([
      [1, 'dead', false],
      [2, 'pending', false],
    ])

    await deliverOnce('block')
    expect(await laneRows(t.db, 'late')).toEqual([
      [1, 'dead', false],
      [2, 'pending', true],
    ])
    expect(sink.requests.map((request) => request.json.sequence)).toEqual([1])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    failing.clear()
    await redrive(t.db, { all: true })
    await deliverOnce('block')
    expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 1, 2])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0, dead: 0 })
  })
})
