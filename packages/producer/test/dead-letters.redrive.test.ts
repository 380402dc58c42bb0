import { randomUUID } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeEach, describe, expect, it } from 'vitest'
import {
  type EnqueuedEvent,
  enqueueMany,
  listDeadLetters,
  type RedriveOptions,
  redrive,
  STRUGGLING_ATTEMPTS,
  stats,
} from '../src/index.js'

const t = useTestDatabase()

const IMPLICIT_ID = '00000000-0000-0000-0000-000000000000'

/** Enqueues `count` events for one aggregate through the public API; returns them in sequence order. */
async function enqueueFor(aggregateId: string, count: number): Promise<EnqueuedEvent[]> {
  return await t.db.transaction().execute((trx) =>
    enqueueMany(
      trx,
      Array.from({ length: count }, (_, index) => ({
        aggregateType: 'order',
        aggregateId,
        eventType: `order.step${index + 1}`,
        payload: { step: index + 1 },
      })),
      { notify: false },
    ),
  )
}

/** Marks events dead as the relay does when attempts run out, `secondsAgo` apart so their order is known. */
async function killEvent(
  eventId: string,
  secondsAgo: number,
  lastStatus: number | null = 500,
): Promise<void> {
  await sql`
    UPDATE outbox SET status = 'dead', attempts = 8, last_status = ${lastStatus}, last_error = 'HTTP ' || coalesce(${lastStatus}::int::text, 'timeout'),
      last_attempt_at = now() - ${secondsAgo} * interval '1 second', dead_at = now() - ${secondsAgo} * interval '1 second'
    WHERE event_id = ${eventId}`.execute(t.db)
}

async function row(eventId: string) {
  return await t.db.selectFrom('outbox').selectAll().where('event_id', '=', eventId).executeTakeFirstOrThrow()
}

async function lane(aggregateId: string) {
  return await t.db
    .selectFrom('outbox_lane')
    .selectAll()
    .where('aggregate_type', '=', 'order')
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirstOrThrow()
}

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

describe('stats', () => {
  it('is all zeros for an empty outbox', async () => {
    expect(await stats(t.db)).toEqual({
      lagSeconds: 0,
      pending: 0,
      inFlight: 0,
      struggling: 0,
      suspect: 0,
      dead: 0,
      blocked: 0,
      // The implicit subscription is listed while it is enabled, even idle.
      subscriptions: [
        {
          id: IMPLICIT_ID,
          name: 'default',
          state: 'enabled',
          tenant: null,
          breaker: 'closed',
          lagSeconds: 0,
          pending: 0,
          inFlight: 0,
          struggling: 0,
          suspect: 0,
          dead: 0,
          blocked: 0,
          dropped: 0,
          oldestDueSeconds: 0,
          disabledReason: null,
          disabledAt: null,
        },
      ],
      warnings: [],
    })
  })

  it('counts pending, struggling, dead, in-flight and blocked, and measures lag from the oldest pending event', async () => {
    const a = await enqueueFor('A', 3)
    const b = await enqueueFor('B', 2)
    await enqueueFor('C', 1)
    await sql`UPDATE outbox SET created_at = now() - interval '120 seconds' WHERE event_id = ${a[0]!.eventId}`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET attempts = ${STRUGGLING_ATTEMPTS} WHERE event_id = ${b[0]!.eventId}`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET attempts = ${STRUGGLING_ATTEMPTS - 1} WHERE event_id = ${a[0]!.eventId}`.execute(
      t.db,
    )
    await killEvent(a[2]!.eventId, 10)
    await sql`UPDATE outbox SET status = 'sent', sent_at = now() WHERE event_id = ${b[1]!.eventId}`.execute(
      t.db,
    )
    // A live lease, an expired lease and a parked lane.
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '30 seconds' WHERE aggregate_id = 'A'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() - interval '1 second' WHERE aggregate_id = 'B'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now() WHERE aggregate_id = 'C'`.execute(
      t.db,
    )

    const figures = await stats(t.db)
    expect(figures).toMatchObject({ pending: 4, struggling: 1, dead: 1, inFlight: 1, blocked: 1 })
    expect(figures.lagSeconds).toBeGreaterThanOrEqual(119)
    expect(figures.lagSeconds).toBeLessThan(180)
    expect(STRUGGLING_ATTEMPTS).toBe(3)
  })
})

describe('listDeadLetters', () => {
  it('lists dead letters oldest first with their last outcome', async () => {
    const a = await enqueueFor('A', 2)
    const b = await enqueueFor('B', 1)
    await killEvent(a[1]!.eventId, 30, 503)
    await killEvent(b[0]!.eventId, 60, null)
    const listed = await listDeadLetters(t.db)
    expect(listed.map((dead) => dead.eventId)).toEqual([b[0]!.eventId, a[1]!.eventId])
    expect(listed[1]).toMatchObject({
      eventId: a[1]!.eventId,
      aggregateType: 'order',
      aggregateId: 'A',
      sequence: 2,
      eventType: 'order.step2',
      attempts: 8,
      lastStatus: 503,
      lastError: 'HTTP 503',
    })
    expect(listed[0]).toMatchObject({ lastStatus: null, lastError: 'HTTP timeout', sequence: 1 })
    for (const dead of listed) {
      expect(dead.deadAt).toBeInstanceOf(Date)
      expect(dead.createdAt).toBeInstanceOf(Date)
      expect(dead.lastAttemptAt).toBeInstanceOf(Date)
    }
  })

  it('pages with limit and after, without repeating or skipping a dead letter', async () => {
    const events = await enqueueFor('P', 7)
    // Several share one dead_at (one UPDATE), which is what a batch of failures looks like; now() has
    // microseconds, more precision than a JavaScript Date.
    await sql`UPDATE outbox SET status = 'dead', dead_at = now() WHERE aggregate_id = 'P' AND sequence <= 4`.execute(
      t.db,
    )
    await sql`UPDATE outbox SET status = 'dead', dead_at = now() + interval '1 microsecond' * sequence WHERE aggregate_id = 'P' AND sequence > 4`.execute(
      t.db,
    )
    const seen: string[] = []
    let after: string | undefined
    for (let page = 0; page < 10; page++) {
      const listed = await listDeadLetters(t.db, { limit: 2, ...(after ? { after } : {}) })
      if (listed.length === 0) break
      expect(listed.length).toBeLessThanOrEqual(2)
      seen.push(...listed.map((dead) => dead.eventId))
      after = listed.at(-1)!.cursor
    }
    expect(seen).toEqual(events.map((event) => event.eventId))
  })

  it('refuses bad options', async () => {
    for (const options of [
      { limit: 0 },
      { limit: 2.5 },
      { after: 'nonsense' },
      { after: 'not-a-date_12' },
      { schema: 'X' },
    ]) {
      await expect(listDeadLetters(t.db, options)).rejects.toMatchObject({
        code: 'ERR_OUTBOX_INVALID_OPTION',
      })
    }
  })
})

describe('redrive', () => {
  it('puts dead letters back to pending with the same id and sequence and attempts reset', async () => {
    const a = await enqueueFor('A', 3)
    await killEvent(a[0]!.eventId, 5)
    const before = await row(a[0]!.eventId)
    const unknown = randomUUID()
    const result = await redrive(t.db, { eventIds: [a[0]!.eventId.toUpperCase(), a[1]!.eventId, unknown] })
    expect(result).toEqual({
      redriven: [a[0]!.eventId],
      notDead: [a[1]!.eventId, unknown],
      deliveries: [{ eventId: a[0]!.eventId, subscriptionId: IMPLICIT_ID }],
      dryRun: false,
    })
    const after = await row(a[0]!.eventId)
    expect(after).toMatchObject({
      id: before.id,
      event_id: before.event_id,
      sequence: before.sequence,
      payload: before.payload,
      status: 'pending',
      attempts: 0,
      dead_at: null,
    })
    expect(after.available_at.getTime()).toBeLessThanOrEqual(Date.now() + 1000)
    expect(await stats(t.db)).toMatchObject({ dead: 0, pending: 3 })
    expect(await listDeadLetters(t.db)).toEqual([])
  })

  it("resumes a lane parked as 'exhausted' and makes the rows held behind it due, leaving other lanes alone", async () => {
    const a = await enqueueFor('A', 3)
    const c = await enqueueFor('C', 2)
    // Lane A: its head died under onExhausted 'block'; the rows behind it wait with available_at = infinity.
    await killEvent(a[0]!.eventId, 5)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'A' AND status = 'pending'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now() WHERE aggregate_id = 'A'`.execute(
      t.db,
    )
    // Lane C: parked by a 409, with a dead letter of its own that is not redriven.
    await killEvent(c[0]!.eventId, 5)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE event_id = ${c[1]!.eventId}`.execute(t.db)
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now() WHERE aggregate_id = 'C'`.execute(
      t.db,
    )
    expect(await stats(t.db)).toMatchObject({ blocked: 2, dead: 2 })

    expect(await redrive(t.db, { eventIds: [a[0]!.eventId] })).toEqual({
      redriven: [a[0]!.eventId],
      notDead: [],
      deliveries: [{ eventId: a[0]!.eventId, subscriptionId: IMPLICIT_ID }],
      dryRun: false,
    })

    expect(await lane('A')).toMatchObject({ blocked_reason: null, blocked_at: null })
    for (const event of a) {
      const revived = await row(event.eventId)
      expect(revived.status).toBe('pending')
      expect(Number.isFinite(revived.available_at.getTime())).toBe(true)
      expect(revived.available_at.getTime()).toBeLessThanOrEqual(Date.now() + 1000)
    }
    expect(await lane('C')).toMatchObject({ blocked_reason: 'conflict' })
    expect((await row(c[0]!.eventId)).status).toBe('dead')
    expect(await stats(t.db)).toMatchObject({ blocked: 1, dead: 1 })
  })

  it('redrives every dead letter with { all: true }', async () => {
    const a = await enqueueFor('A', 2)
    const b = await enqueueFor('B', 1)
    await killEvent(a[1]!.eventId, 5)
    await killEvent(b[0]!.eventId, 6)
    const result = await redrive(t.db, { all: true })
    expect([...result.redriven].sort()).toEqual([a[1]!.eventId, b[0]!.eventId].sort())
    expect(result.notDead).toEqual([])
    expect(await stats(t.db)).toMatchObject({ dead: 0, pending: 3 })
    expect(await redrive(t.db, { all: true })).toEqual({
      redriven: [],
      notDead: [],
      deliveries: [],
      dryRun: false,
    })
  })

  it('refuses bad options and changes nothing', async () => {
    const a = await enqueueFor('A', 1)
    await killEvent(a[0]!.eventId, 5)
    for (const options of [
      {},
      { eventIds: ['not-a-uuid'] },
      { eventIds: 'x' },
      { all: 'yes' },
      { all: true, schema: 'No' },
    ]) {
      await expect(redrive(t.db, options as RedriveOptions)).rejects.toMatchObject({
        code: 'ERR_OUTBOX_INVALID_OPTION',
      })
    }
    expect((await row(a[0]!.eventId)).status).toBe('dead')
  })
})
