import { randomBytes } from 'node:crypto'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, describe, expect, it } from 'vitest'
import { Relay, silentLogger, stats } from '../src/index.js'
import { expectLanesLive, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

async function head(id: string) {
  return await t.db
    .selectFrom('outbox')
    .selectAll()
    .where('aggregate_id', '=', id)
    .orderBy('sequence')
    .executeTakeFirstOrThrow()
}

describe('relay failure handling', () => {
  it('a sink that never answers: the attempt times out and is retried, while other lanes keep flowing', async () => {
    await seedEvents(t.db, ['hang-1', 'ok-1', 'ok-2'], 3)
    const sink = await startSink((request) =>
      request.json.aggregate_id === 'hang-1' ? 'hang' : { status: 200, body: { status: 'applied' } },
    )
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      requestTimeoutMs: 200,
      leaseMs: 2000,
      retrySchedule: [50, 50, 50, 50, 50, 50, 50, 50],
      pollIntervalMs: 10,
      logger: silentLogger,
    })
    try {
      await relay.start()
      await waitFor(async () => (await head('hang-1')).attempts >= 2, 'two timed-out attempts')
      await waitFor(async () => (await stats(t.db)).pending === 3, 'the other lanes to drain')
    } finally {
      await relay.stop({ timeoutMs: 500 })
      await sink.close()
    }
    const hung = await head('hang-1')
    expect(hung.status).toBe('pending')
    expect(hung.last_status).toBeNull()
    expect(hung.last_error).toMatch(/timed out after 200 ms/)
    const hungRequests = sink.requests.filter((request) => request.json.aggregate_id === 'hang-1')
    expect(hungRequests.every((request) => request.json.sequence === 1)).toBe(true)
    const others = sink.requests.filter((request) => request.json.aggregate_id !== 'hang-1')
    // A set: on a loaded machine a 200 ms timeout can also cut off an answered request (a legitimate duplicate).
    expect(
      [...new Set(others.map((request) => `${request.json.aggregate_id}/${request.json.sequence}`))].sort(),
    ).toEqual(['ok-1/1', 'ok-1/2', 'ok-1/3', 'ok-2/1', 'ok-2/2', 'ok-2/3'])
    await sql`DELETE FROM outbox WHERE aggregate_id = 'hang-1'`.execute(t.db)
  })

  it('409 parks the lane without using attempts; stats shows it blocked until a 2xx clears it', async () => {
    await seedEvents(t.db, ['gap-1'], 2)
    let conflict = true
    const sink = await startSink(() =>
      conflict
        ? { status: 409, body: { code: 'sequence_gap' } }
        : { status: 200, body: { status: 'applied' } },
    )
    const parks: number[] = []
    try {
      const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [5, 5], logger: silentLogger })
      relay.on('lane:blocked', (lane) => parks.push(lane.retryInMs ?? -1))
      for (let i = 0; i < 4; i++) {
        expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
        await sql`UPDATE outbox SET available_at = now() WHERE aggregate_id = 'gap-1'`.execute(t.db)
      }
      // Four 409s on a schedule that allows only three attempts: none of them counted.
      expect(await head('gap-1')).toMatchObject({ status: 'pending', attempts: 0, last_status: 409 })
      expect(await stats(t.db)).toMatchObject({ blocked: 1, dead: 0 })
      const lane = await t.db
        .selectFrom('outbox_lane')
        .selectAll()
        .where('aggregate_id', '=', 'gap-1')
        .executeTakeFirstOrThrow()
      expect(lane).toMatchObject({ blocked_reason: 'conflict', conflict_count: 4 })
      // The park grows with each 409 (jitter aside).
      expect(parks[3]!).toBeGreaterThan(parks[0]!)

      conflict = false
      expect(await relay.runOnce()).toMatchObject({ delivered: 2 })
      expect(await stats(t.db)).toMatchObject({ blocked: 0, pending: 0 })
    } finally {
      await sink.close()
    }
  })

  it('a 409 park ends with any other answer: a 500 retry or a dead letter under skip leaves nothing reported blocked', async () => {
    await seedEvents(t.db, ['park-then-500', 'park-then-dead'], 1)
    const answers: Record<string, number[]> = { 'park-then-500': [409, 500], 'park-then-dead': [409, 400] }
    const sink = await startSink((request) => ({
      status: answers[request.json.aggregate_id]!.shift() ?? 500,
    }))
    try {
      const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [60_000], logger: silentLogger })
      await relay.runOnce()
      expect(await stats(t.db)).toMatchObject({ blocked: 2 })
      await sql`UPDATE outbox SET available_at = now() WHERE aggregate_id LIKE 'park-then-%'`.execute(t.db)
      // 'park-then-500' goes into ordinary retries. 'park-then-dead' is given one earlier failed attempt an hour
      // ago (409s are not attempts), so its next failure is its last of two and past the horizon.
      await sql`UPDATE outbox SET attempts = 1, first_failed_at = now() - interval '1 hour'
        WHERE aggregate_id = 'park-then-dead'`.execute(t.db)
      expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 1, dead: 1 })
    } finally {
      await sink.close()
    }
    // Before, the conflict marker outlived both: stats read blocked for ever after the dead letter.
    expect(await stats(t.db)).toMatchObject({ blocked: 0, dead: 1 })
    const lanes = await t.db
      .selectFrom('outbox_lane')
      .select(['aggregate_id', 'blocked_reason', 'conflict_count'])
      .where('aggregate_id', 'like', 'park-then-%')
      .orderBy('aggregate_id')
      .execute()
    expect(lanes).toEqual([
      { aggregate_id: 'park-then-500', blocked_reason: null, conflict_count: 0 },
      { aggregate_id: 'park-then-dead', blocked_reason: null, conflict_count: 0 },
    ])
    await sql`DELETE FROM outbox WHERE aggregate_id LIKE 'park-then-%'`.execute(t.db)
  })

  it('429 and 503 honour Retry-After for the lane', async () => {
    await seedEvents(t.db, ['ra-1', 'ra-2'], 1)
    const sink = await startSink((request) =>
      request.json.aggregate_id === 'ra-1'
        ? { status: 429, headers: { 'retry-after': '120' } }
        : { status: 503, headers: { 'retry-after': new Date(Date.now() + 30_000).toUTCString() } },
    )
    try {
      const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [5], logger: silentLogger })
      expect(await relay.runOnce()).toMatchObject({ failed: 2 })
      const { rows } = await sql<{ aggregate_id: string; wait: number }>`
        SELECT aggregate_id, extract(epoch FROM available_at - now())::float AS wait FROM outbox
        WHERE aggregate_id LIKE 'ra-%' ORDER BY aggregate_id`.execute(t.db)
      expect(rows[0]!.wait).toBeGreaterThan(110)
      expect(rows[0]!.wait).toBeLessThanOrEqual(120)
      expect(rows[1]!.wait).toBeGreaterThan(20)
      expect(rows[1]!.wait).toBeLessThanOrEqual(30)
      expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
    } finally {
      await sink.close()
    }
  })

  it('refuses options that would let a request outlive its lease, and other bad options, with a clear message', () => {
    expect(
      () =>
        new Relay({ db: t.db, endpoint: 'http://127.0.0.1:1/hooks', leaseMs: 1000, requestTimeoutMs: 900 }),
    ).toThrow(/requestTimeoutMs \(900\) \+ a 250 ms margin must be below leaseMs \(1000\)/)
    expect(() => new Relay({ db: t.db, endpoint: 'ftp://x/hooks' })).toThrow(/http or https/)
    expect(() => new Relay({ db: t.db, endpoint: 'not a url' })).toThrow(/not a valid URL/)
    expect(() => new Relay({ db: t.db, endpoint: 'http://x/h', secret: 'secret' })).toThrow(/whsec_/)
    const short = `whsec_${Buffer.from('only-20-bytes-secret').toString('base64')}`
    expect(() => new Relay({ db: t.db, endpoint: 'http://x/h', secret: short })).toThrow(
      /signing secret is 20 bytes long; Standard Webhooks secrets need at least 24 random bytes/,
    )
    expect(
      () =>
        new Relay({
          db: t.db,
          endpoint: 'http://x/h',
          secret: [`whsec_${randomBytes(24).toString('base64')}`, short],
        }),
    ).toThrow(/signing secret #2 is 20 bytes long/)
    expect(() => new Relay({ db: t.db, endpoint: 'http://x/h', concurrency: 0 })).toThrow(/concurrency/)
    expect(() => new Relay({ db: t.db, endpoint: 'http://x/h', onExhausted: 'drop' as 'skip' })).toThrow(
      /onExhausted/,
    )
    expect(() => new Relay({ db: {} as never, endpoint: 'http://x/h' })).toThrow(/Kysely/)
  })
})
