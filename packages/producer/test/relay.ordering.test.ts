import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, describe, expect, it } from 'vitest'
import { Relay, silentLogger } from '../src/index.js'
import { expectLanesLive, FAST_SCHEDULE, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

describe('relay ordering', () => {
  it('a lane stops at its first failure: sequence 3 is never sent before sequence 2 succeeded', async () => {
    await seedEvents(t.db, ['stop-1'], 3)
    let failSecond = true
    const sink = await startSink((request) => {
      if (request.json.sequence === 2 && failSecond) {
        failSecond = false
        return { status: 500, body: { error: 'boom' } }
      }
      return { status: 200, body: { status: 'applied' } }
    })
    try {
      const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [0, 0], logger: silentLogger })
      expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 1, dead: 0 })
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2])
      const second = await t.db
        .selectFrom('outbox')
        .selectAll()
        .where('sequence', '=', 2)
        .executeTakeFirstOrThrow()
      expect(second).toMatchObject({ status: 'pending', attempts: 1, last_status: 500 })
      expect(second.last_error).toContain('boom')
      expect(await relay.runOnce()).toEqual({ delivered: 2, failed: 0, dead: 0 })
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 2, 3])
    } finally {
      await sink.close()
    }
  })

  it('a lane goes on past a full batch under the same claim, and still stops at a failure in a later batch', async () => {
    await seedEvents(t.db, ['cont-1'], 12)
    const tokenNow = async () =>
      (
        await t.db
          .selectFrom('outbox_lane')
          .select('claim_token')
          .where('aggregate_id', '=', 'cont-1')
          .executeTakeFirstOrThrow()
      ).claim_token
    const tokens: (string | null)[] = []
    let failSeventh = true
    const sink = await startSink(async (request) => {
      tokens.push(await tokenNow())
      if (request.json.sequence === 7 && failSeventh) {
        failSeventh = false
        return { status: 500, body: { error: 'boom' } }
      }
      return { status: 200, body: { status: 'applied' } }
    })
    try {
      const relay = new Relay({
        db: t.db,
        endpoint: sink.url,
        batchSize: 5,
        retrySchedule: [0],
        logger: silentLogger,
      })
      expect(await relay.runOnce()).toEqual({ delivered: 6, failed: 1, dead: 0 })
      // Batches 1–5 and 6–10 under ONE claim (no release and re-claim between them), stopping at 7's failure.
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7])
      expect(new Set(tokens).size).toBe(1)
      expect(tokens[0]).not.toBeNull()
      expect(await relay.runOnce()).toEqual({ delivered: 6, failed: 0, dead: 0 })
      expect(sink.requests.slice(7).map((request) => request.json.sequence)).toEqual([7, 8, 9, 10, 11, 12])
    } finally {
      await sink.close()
    }
  })

  it('a head waiting in backoff stops its whole lane even when a later row of it is due', async () => {
    await seedEvents(t.db, ['backoff-1'], 2)
    const sink = await startSink(() => ({ status: 500 }))
    try {
      const relay = new Relay({
        db: t.db,
        endpoint: sink.url,
        retrySchedule: [3_600_000],
        logger: silentLogger,
      })
      expect(await relay.runOnce()).toMatchObject({ failed: 1 })
      // Make the row behind the head look due, as a clock skew or a manual fix might.
      await sql`UPDATE outbox SET available_at = now() - interval '1 hour' WHERE sequence = 2`.execute(t.db)
      expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1])
    } finally {
      await sink.close()
    }
  })

  it('three relays on separate pools deliver 2,000 events over 50 aggregates through a sink failing 30%, in order, one request per lane', {
    timeout: 120_000,
  }, async () => {
    const aggregates = Array.from({ length: 50 }, (_, i) => `agg-${i}`)
    await seedEvents(t.db, aggregates, 40)
    const acked = new Map<string, number>() // highest sequence answered 2xx, contiguous from 1
    const violations: string[] = []
    let maxInFlight = 0
    let seed = 42
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed / 2 ** 31
    }
    const sink = await startSink(async (request) => {
      const key = `${request.json.aggregate_type}:${request.json.aggregate_id}`
      maxInFlight = Math.max(maxInFlight, sink.inFlight.get(key) ?? 0)
      const done = acked.get(key) ?? 0
      if (request.json.sequence > done + 1)
        violations.push(`${key} got ${request.json.sequence} after ${done} acked`)
      await new Promise((resolve) => setTimeout(resolve, random() * 3))
      if (random() < 0.3) return { status: 500 }
      if (request.json.sequence === done + 1) acked.set(key, done + 1)
      return { status: 200, body: { status: 'applied' } }
    })
    const relays = [0, 1, 2].map(
      () =>
        new Relay({
          db: t.connect({ max: 6 }),
          endpoint: sink.url,
          concurrency: 8,
          batchSize: 25,
          retrySchedule: FAST_SCHEDULE,
          pollIntervalMs: 20,
          logger: silentLogger,
        }),
    )
    try {
      await Promise.all(relays.map((relay) => relay.start()))
      const pending = () =>
        t.db
          .selectFrom('outbox')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('status', '=', 'pending')
          .where('aggregate_id', 'like', 'agg-%')
          .executeTakeFirstOrThrow()
      await waitFor(async () => (await pending()).n === '0', 'all 2,000 events', 90_000)
    } finally {
      await Promise.all(relays.map((relay) => relay.stop()))
      await sink.close()
    }
    expect(violations).toEqual([])
    expect(maxInFlight).toBe(1)
    for (const id of aggregates) expect(acked.get(`order:${id}`)).toBe(40)
    const counts = await t.db
      .selectFrom('outbox')
      .where('aggregate_id', 'like', 'agg-%')
      .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
      .groupBy('status')
      .execute()
    expect(counts).toEqual([{ status: 'sent', n: '2000' }])
    const failures = sink.requests.filter((request) => request).length - 2000
    expect(failures).toBeGreaterThan(300)
  })
})
