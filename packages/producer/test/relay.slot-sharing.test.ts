import { type Sink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../../../test/model/manual-clock.js'
import {
  createSubscription,
  enqueue,
  type Relay,
  type RelayEventMap,
  type RelayOptions,
} from '../src/index.js'
import { relayTestHooks } from '../src/relay.js'
import { RELAY_RUNTIME } from '../src/runtime.js'
import { useStoredSubscriptions } from './stored-subscriptions.js'
import { deferred, waitFor } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 20 })

async function publish(aggregateId: string, n = 0) {
  await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
    )
}

describe('slots shared between subscriptions', () => {
  it("a slow endpoint holding its requests keeps to its share: another subscription's events keep arriving", async () => {
    const held = deferred()
    const slow = await stored.sink(async () => {
      await held.promise
      return { status: 200, body: { status: 'applied' } }
    })
    const healthy = await stored.sink()
    await createSubscription(t.db, { url: slow.url, name: 'slot-slow' })
    // Events for both, but the healthy subscription's only later: the slow one is alone with work at first.
    for (let lane = 0; lane < 8; lane++) await publish(`slow-${lane}`)
    await createSubscription(t.db, { url: healthy.url, name: 'slot-healthy' })
    const relay = stored.relay({ concurrency: 4 })
    await relay.start()
    await waitFor(() => slow.requests.length >= 1, 'the slow endpoint to get requests')
    // The healthy subscription's events arrive while every request to the slow endpoint is still unanswered:
    // the slow one never took the slots the healthy one needs.
    for (let n = 0; n < 3; n++) await Promise.all(['h1', 'h2', 'h3'].map((lane) => publish(lane, n)))
    await waitFor(() => healthy.requests.length === 9, 'the healthy subscription, beside the held requests')
    expect(slow.requests.length).toBeLessThanOrEqual(2)
    held.resolve()
    // The slow subscription takes every event: its 8, and the healthy one's 9 enqueued after both existed.
    await waitFor(() => new Set(slow.requests.map((r) => r.json.event_id)).size === 17, 'the slow backlog')
  })

  it('a relay starting beside a backlog claims no more than its share of it ahead: the others still get claimed', async () => {
    const held = deferred()
    const slow = await stored.sink(async () => {
      await held.promise
      return { status: 200, body: { status: 'applied' } }
    })
    // The healthy endpoint holds its first request too: the healthy subscription stays busy with one lane.
    const first = deferred()
    let requests = 0
    const healthy = await stored.sink(async () => {
      requests += 1
      if (requests === 1) await first.promise
      return { status: 200, body: { status: 'applied' } }
    })
    await createSubscription(t.db, { url: slow.url, name: 'slot-backlog', eventTypes: ['ledger.*'] })
    await createSubscription(t.db, { url: healthy.url, name: 'slot-busy', eventTypes: ['order.*'] })
    for (let lane = 0; lane < 8; lane++) {
      await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'account',
          aggregateId: `b${lane}`,
          eventType: 'ledger.entry',
          payload: {},
        }),
      )
    }
    await publish('h0')
    // Both have due lanes when the relay starts: its first claim serves both while neither is busy yet. The
    // held requests must not time out while the test waits (that would free their slots by itself).
    const relay = stored.relay({ concurrency: 4, requestTimeoutMs: 30_000 })
    await relay.start()
    await waitFor(
      () => healthy.requests.length === 1 && slow.requests.length >= 1,
      'both endpoints to get requests',
    )
    for (const lane of ['h1', 'h2', 'h3']) await publish(lane)
    await waitFor(
      () => healthy.requests.length === 4,
      "the healthy subscription's next lanes, beside the backlog",
    )
    first.resolve()
    held.resolve()
    await waitFor(() => new Set(slow.requests.map((r) => r.json.event_id)).size === 8, 'the backlog')
  })

  it('a lane claimed before another relay opened the breaker hands itself back once a failure says so', async () => {
    const first = deferred()
    const down = await stored.sink(async () => {
      await first.promise
      return { status: 500 }
    })
    const { id } = await createSubscription(t.db, { url: down.url, name: 'slot-breaker' })
    await publish('b1')
    await publish('b2')
    const relay = stored.relay({ concurrency: 1, endpointBreaker: { failures: 100, cooldownMs: 600_000 } })
    const retries: RelayEventMap['delivery:retry'][] = []
    relay.on('delivery:retry', (event) => void retries.push(event))
    await relay.start()
    // One lane in delivery, its request held; the other claimed ahead.
    await waitFor(
      () => down.requests.length === 1 && relayTestHooks(relay).activity().readyLanes === 1,
      'one request under way and one lane claimed ahead',
    )
    // Another relay opens the breaker (what its failure statement writes), after this one claimed both lanes.
    await sql`
      UPDATE outbox_subscription
      SET breaker_state = 'open', breaker_opened_at = now(), breaker_cooldown_ms = 600000,
          probe_at = now() + interval '10 minutes'
      WHERE id = ${id}::uuid`.execute(t.db)
    first.resolve()
    await waitFor(() => retries.length === 1, 'the held request to fail')
    await waitFor(() => {
      const activity = relayTestHooks(relay).activity()
      return activity.activeLanes === 0 && activity.readyLanes === 0 && !activity.marksBusy
    }, 'the lane claimed ahead to be handed back')
    // The failure's statement said the breaker is open: the lane claimed ahead sent nothing.
    expect(down.requests).toHaveLength(1)
  })
})

describe('hanging and failing endpoints beside a healthy subscription (the slot rule)', () => {
  /** `count` subscriptions whose endpoints accept every request and answer none until `release` resolves. */
  async function hangingSubscriptions(count: number, release: Promise<void>) {
    const sinks: Sink[] = []
    const ids: string[] = []
    for (let n = 0; n < count; n++) {
      const sink = await stored.sink(async () => {
        await release
        return { status: 200, body: { status: 'applied' } }
      })
      const { id } = await createSubscription(t.db, {
        url: sink.url,
        name: `hang-${n}`,
        eventTypes: ['hang.*'],
      })
      sinks.push(sink)
      ids.push(id)
    }
    return { sinks, ids, held: () => sinks.reduce((sum, sink) => sum + sink.requests.length, 0) }
  }

  async function publishType(eventType: string, aggregateId: string) {
    await t.db
      .transaction()
      .execute((trx) => enqueue(trx, { aggregateType: 'order', aggregateId, eventType, payload: {} }))
  }

  it('four endpoints that never answer hold their slots: the healthy subscription still starts its requests', async () => {
    const release = deferred()
    const hanging = await hangingSubscriptions(4, release.promise)
    const healthy = await stored.sink()
    await createSubscription(t.db, { url: healthy.url, name: 'healthy', eventTypes: ['ok.*'] })
    // Plenty of lanes for every hanging endpoint: 4 shares of 4 slots fill all 16 (the case that stalled before).
    for (let lane = 0; lane < 8; lane++) await publishType('hang.created', `hang-${lane}`)
    // No request may time out while the test looks: the hanging requests keep their slots throughout.
    const relay = stored.relay({ concurrency: 16, requestTimeoutMs: 120_000, leaseMs: 150_000 })
    await relay.start()
    // They take slots as if healthy until their first request has gone unanswered for a while (then they are
    // failing, and keep to their quota): however quickly that happens here, they hold the slots they took.
    await waitFor(() => hanging.held() >= 4, 'the hanging endpoints to hold slots')
    for (let n = 0; n < 3; n++) {
      for (const lane of ['h1', 'h2', 'h3']) await publishType('ok.created', lane)
    }
    await waitFor(
      () => healthy.requests.length === 9,
      'the healthy subscription, beside 16 unanswered requests',
    )
    // Never more than the rule's bound: concurrency + one first request per subscription.
    expect(relayTestHooks(relay).activity().requestsInFlight).toBeLessThanOrEqual(16 + 5)
    release.resolve()
    await waitFor(() => hanging.held() === 4 * 8, 'the hanging endpoints, once they answer')
  })

  it('endpoints known to fail from their record in PostgreSQL hold at most a quarter of the slots from the start', async () => {
    const release = deferred()
    const hanging = await hangingSubscriptions(4, release.promise)
    // What an earlier relay's timeouts wrote: a failure streak on each (below the breaker's threshold).
    await sql`UPDATE outbox_subscription SET failure_streak = 2, streak_started_at = now()
              WHERE id = ANY(${hanging.ids}::uuid[])`.execute(t.db)
    const healthy = await stored.sink()
    await createSubscription(t.db, { url: healthy.url, name: 'healthy', eventTypes: ['ok.*'] })
    for (let lane = 0; lane < 8; lane++) await publishType('hang.created', `hang-${lane}`)
    for (let lane = 0; lane < 12; lane++) await publishType('ok.created', `ok-${lane}`)
    const relay = stored.relay({ concurrency: 8, requestTimeoutMs: 120_000, leaseMs: 150_000 })
    await relay.start()
    await waitFor(() => healthy.requests.length === 12, 'the healthy subscription')
    await waitFor(() => hanging.held() >= 1, 'the failing endpoints to get a request')
    // Later events make the relay claim and start lanes again: each time, more hanging requests would start were the
    // rule to allow them.
    await publishType('ok.created', 'ok-late')
    await waitFor(() => healthy.requests.length === 13, 'a later healthy event')
    // A quarter of 8 slots: 2, all four failing subscriptions together.
    expect(hanging.held()).toBeLessThanOrEqual(2)
    release.resolve()
    await waitFor(() => hanging.held() === 4 * 8, 'the failing endpoints, once they answer')
  })

  /**
   * A subscription whose endpoint answers 500 at once, known to fail from its record (a streak far from its breaker's
   * threshold, so only the slot rule and the claims hold it), with 24 due lanes; beside it a healthy one, idle.
   */
  async function failingBesideHealthy(): Promise<Sink> {
    const failing = await stored.sink(() => ({ status: 500 }))
    const { id } = await createSubscription(t.db, {
      url: failing.url,
      name: 'fail-fast',
      eventTypes: ['fail.*'],
    })
    const healthy = await stored.sink()
    await createSubscription(t.db, { url: healthy.url, name: 'healthy', eventTypes: ['ok.*'] })
    await sql`UPDATE outbox_subscription SET failure_streak = 1, streak_started_at = now()
              WHERE id = ${id}::uuid`.execute(t.db)
    for (let lane = 0; lane < 24; lane++) await publishType('fail.ping', `fail-${lane}`)
    return failing
  }

  /** No lane of the relay is in delivery or waiting to start, and no request is under way. */
  function deliveringNothing(relay: Relay): boolean {
    const activity = relayTestHooks(relay).activity()
    return activity.activeLanes === 0 && activity.readyLanes === 0 && activity.requestsInFlight === 0
  }

  it('an endpoint answering 500 at once rides one claim per interval, not every claim: its next lanes wait for the clock', async () => {
    const clock = new ManualClock()
    const failing = await failingBesideHealthy()
    const relay = stored.relay({
      concurrency: 8,
      endpointBreaker: { failures: 1000, cooldownMs: 600_000 },
      [RELAY_RUNTIME]: { clock, random: Math.random },
    } as Partial<RelayOptions>)
    const hooks = relayTestHooks(relay)
    await hooks.startStepping()
    const settled = async (what: string) => {
      await waitFor(() => deliveringNothing(relay), what)
      await hooks.flush()
    }
    await hooks.step()
    await settled('the first claim of the failing lanes to be tried')
    const first = failing.requests.length
    expect(first).toBeGreaterThan(0)
    // Due lanes are left, and every slot is free; the clock has not moved, so no claim offers them room.
    await hooks.step()
    await hooks.step()
    await settled('a pass without room for the failing subscription')
    expect(failing.requests).toHaveLength(first)
    clock.advance(250)
    await hooks.step()
    await settled('the next claim of the failing lanes')
    expect(failing.requests.length).toBeGreaterThan(first)
  })

  it("a failing subscription held back by the claims' interval is claimed again when it ends, not a poll interval later", async () => {
    const failing = await failingBesideHealthy()
    // A poll interval far longer than the test waits: only the interval's own wake-up can bring the next claim.
    const relay = stored.relay({
      concurrency: 8,
      pollIntervalMs: 600_000,
      endpointBreaker: { failures: 1000, cooldownMs: 600_000 },
    })
    await relay.start()
    await waitFor(
      () => failing.requests.length > 0 && deliveringNothing(relay),
      'the first claim of the failing lanes to be tried',
    )
    const firstClaim = failing.requests.length
    await waitFor(
      () => failing.requests.length > firstClaim,
      'the failing lanes claimed again after the interval',
    )
    expect(new Set(failing.requests.map((request) => request.json.event_id)).size).toBeGreaterThan(firstClaim)
  })

  it("runOnce is never held back by the failing claims' interval: each cycle claims the failing lanes due", async () => {
    const failing = await failingBesideHealthy()
    // A clock that never moves: were the interval applied, every cycle after the first would claim none of them.
    const relay = stored.relay({
      concurrency: 8,
      endpointBreaker: { failures: 1000, cooldownMs: 600_000 },
      [RELAY_RUNTIME]: { clock: new ManualClock(), random: Math.random },
    } as Partial<RelayOptions>)
    const first = await relay.runOnce()
    const second = await relay.runOnce()
    expect(first.failed).toBeGreaterThan(0)
    expect(second.failed).toBeGreaterThan(0)
    expect(failing.requests).toHaveLength(first.failed + second.failed)
  })
})
