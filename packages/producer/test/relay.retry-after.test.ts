import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  listDeadLetters,
  Relay,
  type RelayEventMap,
  retryHorizonMs,
  silentLogger,
  stats,
} from '../src/index.js'
import { expectLanesLive, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

// A first retry after 50 ms, then long ones: 4 attempts, and a horizon of 0.8 × 4.05 s = 3.24 s. An endpoint saying
// `Retry-After: 0` is tried again after the floor (the first delay, 50 ms), so its attempts run out long before the
// horizon: the rule under test is that this never makes the event dead early.
const SCHEDULE = [50, 2000, 2000]
const HORIZON_MS = retryHorizonMs(SCHEDULE)

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

describe('Retry-After decides when to try again, never when to give up', () => {
  it('a subscriber answering 503 Retry-After: 0 through a short deploy gets the event once it is back, not a dead letter', async () => {
    expect(HORIZON_MS).toBe(3240)
    await seedEvents(t.db, ['deploy'], 2)
    // The deploy lasts five requests, not a span of wall time: on a slow machine the relay's first request may come
    // after any fixed span has passed. Its own schedule puts the horizon (0.8 × 40.05 s) far beyond the five
    // retries at the Retry-After floor (50, 100, 200, 400 ms), so no machine is slow enough to reach it.
    const deploySchedule = [50, 20_000, 20_000]
    expect(retryHorizonMs(deploySchedule)).toBe(32_040)
    const DEPLOY_REQUESTS = 5
    let refused = 0
    const sink = await startSink((request) => {
      if (request.json.sequence === 1 && refused < DEPLOY_REQUESTS) {
        refused += 1
        return { status: 503, headers: { 'retry-after': '0' } }
      }
      return { status: 200, body: { status: 'applied' } }
    })
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: deploySchedule,
      pollIntervalMs: 10,
      logger: silentLogger,
    })
    const retries: RelayEventMap['delivery:retry'][] = []
    relay.on('delivery:retry', (retry) => retries.push(retry))
    try {
      await relay.start()
      await waitFor(async () => (await stats(t.db)).pending === 0, 'the lane to drain', 60_000)
    } finally {
      await relay.stop()
      await sink.close()
    }
    expect(await listDeadLetters(t.db)).toEqual([])
    const first = sink.requests.filter((request) => request.json.sequence === 1)
    // More attempts than maxAttempts (4): under the old rule the 4th 503 dead-lettered it after ~150 ms. Here every
    // refusal was retried, and the first request after the deploy delivered it.
    expect(first.length).toBe(DEPLOY_REQUESTS + 1)
    // Never sooner than the floor, whatever the header says.
    expect(retries.every((retry) => retry.retryInMs >= 50)).toBe(true)
    for (let n = 1; n < first.length; n++) expect(first[n]!.at - first[n - 1]!.at).toBeGreaterThanOrEqual(45)
    expect(sink.requests.at(-1)!.json.sequence).toBe(2)
  })

  it('a subscriber that keeps answering 429 Retry-After: 0 is given up only once the horizon has passed since the first failure', async () => {
    await seedEvents(t.db, ['limited'], 1)
    const sink = await startSink(() => ({ status: 429, headers: { 'retry-after': '0' } }))
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: SCHEDULE,
      pollIntervalMs: 10,
      logger: silentLogger,
    })
    let deadAt: number | undefined
    relay.on('delivery:dead', () => {
      deadAt = performance.now()
    })
    try {
      await relay.start()
      await waitFor(() => deadAt !== undefined, 'the dead letter', 60_000)
    } finally {
      await relay.stop()
      await sink.close()
    }
    const firstFailure = sink.requests[0]!.at
    expect(deadAt! - firstFailure).toBeGreaterThanOrEqual(HORIZON_MS)
    const [dead] = await listDeadLetters(t.db)
    expect(dead).toMatchObject({ lastStatus: 429 })
    expect(dead!.attempts).toBe(sink.requests.length)
    expect(dead!.attempts).toBeGreaterThan(4)
  })
})
