import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  enqueue,
  listAudit,
  listDeadLetters,
  listLanes,
  type OnExhausted,
  Relay,
  redrive,
  repairIntegrity,
  silentLogger,
  skipLaneHead,
  stats,
  unblockLane,
} from '../src/index.js'
import {
  deferred,
  IMPLICIT_SUBSCRIPTION,
  laneRows,
  seedEvents,
  waitFor,
  waitForLockWaiters,
} from './support.js'

const t = useTestDatabase()

/** Answers per `aggregate:sequence`: 500 for failing, 409 for conflicting; everything else is applied. */
const failing = new Set<string>()
const conflicting = new Set<string>()
let sink: Sink

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane, outbox_audit`.execute(t.db)
  failing.clear()
  conflicting.clear()
  sink = await startSink((request) => {
    const key = `${request.json.aggregate_id}:${request.json.sequence}`
    if (failing.has(key)) return { status: 500 }
    if (conflicting.has(key)) return { status: 409, body: { code: 'sequence_gap' } }
    return { status: 200, body: { status: 'applied' } }
  })
})

afterEach(async () => {
  await sink.close()
})

async function deliverOnce(onExhausted: OnExhausted = 'block'): Promise<void> {
  await new Relay({
    db: t.db,
    endpoint: sink.url,
    retrySchedule: [],
    onExhausted,
    logger: silentLogger,
  }).runOnce()
}

const sent = (aggregateId: string) =>
  sink.requests.filter((request) => request.json.aggregate_id === aggregateId).map((r) => r.json.sequence)

const lane = (aggregateId: string) => ({
  subscriptionId: IMPLICIT_SUBSCRIPTION,
  aggregateType: 'order',
  aggregateId,
})

async function expectClean(): Promise<void> {
  expect((await checkIntegrity(t.db)).violations).toEqual([])
}

describe('unblockLane', () => {
  it('resumes a lane blocked by an exhausted event: the events behind go next, in order; the blocker stays dead and redrivable', async () => {
    await seedEvents(t.db, ['stuck'], 3)
    failing.add('stuck:1')
    await deliverOnce()
    const [blocker] = await listDeadLetters(t.db)

    const result = await unblockLane(t.db, { ...lane('stuck'), actor: 'alice' })
    expect(result).toEqual({ outcome: 'resumed', released: 2, blockerEventId: blocker!.eventId })
    expect(await laneRows(t.db, 'stuck')).toEqual([
      [1, 'dead', false],
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    await expectClean()
    const [entry] = await listAudit(t.db)
    expect(entry).toMatchObject({
      actor: 'alice',
      action: 'lane.unblock',
      target: lane('stuck'),
      result: { outcome: 'resumed', released: 2, blockerEventId: blocker!.eventId },
    })

    await deliverOnce()
    expect(sent('stuck')).toEqual([1, 2, 3])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0, dead: 1 })

    failing.clear()
    expect((await redrive(t.db, { eventIds: [blocker!.eventId] })).redriven).toEqual([blocker!.eventId])
    await deliverOnce()
    expect(sent('stuck')).toEqual([1, 2, 3, 1])
    expect(await stats(t.db)).toMatchObject({ pending: 0, dead: 0 })
    await expectClean()
  })

  it('ends a 409 park: the head is due now and delivered', async () => {
    await seedEvents(t.db, ['gap'], 2)
    conflicting.add('gap:1')
    await deliverOnce()
    expect((await listLanes(t.db, { state: 'blocked' }))[0]).toMatchObject({ reason: 'conflict' })

    conflicting.clear()
    expect(await unblockLane(t.db, lane('gap'))).toEqual({
      outcome: 'conflict-cleared',
      released: 2,
      blockerEventId: null,
    })
    const { rows } = await sql<{ conflict_count: number; blocked_reason: string | null }>`
      SELECT conflict_count, blocked_reason FROM outbox_lane WHERE aggregate_id = 'gap'`.execute(t.db)
    expect(rows[0]).toEqual({ conflict_count: 0, blocked_reason: null })
    await expectClean()
    expect((await listAudit(t.db))[0]).toMatchObject({ actor: 'api', action: 'lane.unblock' })

    await deliverOnce()
    expect(sent('gap')).toEqual([1, 1, 2])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0 })
  })

  it('refuses a lane that is not blocked, and one that does not exist', async () => {
    await seedEvents(t.db, ['moving'], 1)
    await expect(unblockLane(t.db, lane('moving'))).rejects.toMatchObject({
      code: 'ERR_OUTBOX_LANE_NOT_FOUND',
      message: expect.stringMatching(/is not blocked/),
    })
    await expect(unblockLane(t.db, lane('nowhere'))).rejects.toMatchObject({
      code: 'ERR_OUTBOX_LANE_NOT_FOUND',
    })
    await expect(unblockLane(t.db, { ...lane('moving'), subscriptionId: 'acme' })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'subscriptionId',
    })
    await expect(unblockLane(t.db, { ...lane('moving'), actor: '' })).rejects.toMatchObject({
      option: 'actor',
    })
    expect(await listAudit(t.db)).toEqual([])
  })

  it('refuses a lane under a live lease, and changes nothing', async () => {
    await seedEvents(t.db, ['held'], 2)
    const answer = deferred()
    await sink.close()
    sink = await startSink(async () => {
      await answer.promise
      return { status: 200, body: { status: 'applied' } }
    })
    const relay = new Relay({ db: t.db, endpoint: sink.url, logger: silentLogger, pollIntervalMs: 20 })
    await relay.start()
    try {
      await waitFor(() => sink.requests.length === 1, 'the request in flight')
      const before = await laneRows(t.db, 'held')
      await expect(unblockLane(t.db, lane('held'))).rejects.toMatchObject({ code: 'ERR_OUTBOX_LANE_LEASED' })
      await expect(skipLaneHead(t.db, lane('held'))).rejects.toMatchObject({ code: 'ERR_OUTBOX_LANE_LEASED' })
      expect(await laneRows(t.db, 'held')).toEqual(before)
      expect(await listAudit(t.db)).toEqual([])
    } finally {
      answer.resolve()
      await relay.stop()
    }
  })
})

describe('unblockLane against a concurrent enqueue', () => {
  it('waits for an enqueue open on the aggregate, and releases the event it wrote behind the block too', async () => {
    await seedEvents(t.db, ['racing'], 2)
    failing.add('racing:1')
    await deliverOnce()

    // The enqueue reads the lane as blocked and writes its event at 'infinity'; its transaction is still open when
    // the unblock starts. The unblock must wait for it, or that event stays at 'infinity' in an unblocked lane.
    const open = await t.db.startTransaction().execute()
    await enqueue(open, {
      aggregateType: 'order',
      aggregateId: 'racing',
      eventType: 'order.updated',
      payload: {},
    })
    const unblocking = unblockLane(t.connect({ max: 1 }), lane('racing'))
    await waitForLockWaiters(t.db)
    await open.commit().execute()
    expect(await unblocking).toMatchObject({ outcome: 'resumed', released: 2 })

    expect(await laneRows(t.db, 'racing')).toEqual([
      [1, 'dead', false],
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    await expectClean()
    await deliverOnce()
    expect(sent('racing')).toEqual([1, 2, 3])
    expect(await stats(t.db)).toMatchObject({ pending: 0, blocked: 0 })
  })
})

describe('skipLaneHead', () => {
  it('dead-letters the head with the reason and moves the lane on; the skipped event is listed and redrivable', async () => {
    await seedEvents(t.db, ['poison'], 3)
    conflicting.add('poison:1')
    await deliverOnce('skip')
    const head = (await listLanes(t.db, { state: 'blocked' }))[0]!.head!

    const result = await skipLaneHead(t.db, { ...lane('poison'), reason: 'TICKET-7', actor: 'bob' })
    expect(result).toEqual({ eventId: head.eventId, sequence: 1, released: 2 })
    expect(await laneRows(t.db, 'poison')).toEqual([
      [1, 'dead', false],
      [2, 'pending', false],
      [3, 'pending', false],
    ])
    const [dead] = await listDeadLetters(t.db)
    expect(dead).toMatchObject({ eventId: head.eventId, sequence: 1, lastError: 'skipped by bob: TICKET-7' })
    expect(await listLanes(t.db, { state: 'blocked' })).toEqual([])
    await expectClean()
    expect((await listAudit(t.db))[0]).toMatchObject({
      actor: 'bob',
      action: 'lane.skip-head',
      target: lane('poison'),
      result: { eventId: head.eventId, sequence: 1, released: 2, reason: 'TICKET-7' },
    })

    await deliverOnce('skip')
    expect(sent('poison')).toEqual([1, 2, 3])

    conflicting.clear()
    expect((await redrive(t.db, { eventIds: [head.eventId] })).redriven).toEqual([head.eventId])
    await deliverOnce('skip')
    expect(sent('poison')).toEqual([1, 2, 3, 1])
    expect(await stats(t.db)).toMatchObject({ pending: 0, dead: 0, blocked: 0 })
  })

  it('refuses a lane blocked by an exhausted event, and one with nothing pending', async () => {
    await seedEvents(t.db, ['blocked'], 2)
    failing.add('blocked:1')
    await deliverOnce()
    const before = await laneRows(t.db, 'blocked')
    await expect(skipLaneHead(t.db, lane('blocked'))).rejects.toMatchObject({
      code: 'ERR_OUTBOX_REFUSED',
      message: expect.stringMatching(/unblock it first or redrive its blocker/),
    })
    expect(await laneRows(t.db, 'blocked')).toEqual(before)

    await seedEvents(t.db, ['done'], 1)
    await deliverOnce()
    await expect(skipLaneHead(t.db, lane('done'))).rejects.toMatchObject({
      code: 'ERR_OUTBOX_LANE_NOT_FOUND',
      message: expect.stringMatching(/nothing pending/),
    })
    expect(await listAudit(t.db)).toEqual([])
  })
})

describe('repairIntegrity', () => {
  it('records one audit row per run that mended something, under its actor', async () => {
    await seedEvents(t.db, ['damaged', 'also'], 2)
    await sql`UPDATE outbox SET available_at = 'infinity'`.execute(t.db)
    const report = await repairIntegrity(t.db, { actor: 'doctor-bot' })
    expect(report.after.ok).toBe(true)
    const entries = await listAudit(t.db)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      actor: 'doctor-bot',
      action: 'integrity.repair',
      result: { repaired: 2, skipped: 0 },
    })
    const target = entries[0]!.target as { lanes: { aggregateId: string }[] }
    expect(target.lanes.map((one) => one.aggregateId).sort()).toEqual(['also', 'damaged'])

    // A run with nothing to do records nothing.
    await repairIntegrity(t.db)
    expect(await listAudit(t.db)).toHaveLength(1)
  })
})
