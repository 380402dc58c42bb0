import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  getSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  type Relay,
  type RelayEventMap,
  stats,
} from '../src/index.js'
import { useStoredSubscriptions } from './stored-subscriptions.js'
import { metricValue, waitFor } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, {
  pollIntervalMs: 20,
  retrySchedule: Array.from({ length: 50 }, () => 10),
})
const sink = stored.sink
const relay = stored.relay

async function publish(aggregateId: string, n = 0) {
  await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
    )
}

function collect<K extends keyof RelayEventMap>(relays: readonly Relay[], name: K): RelayEventMap[K][] {
  const seen: RelayEventMap[K][] = []
  for (const one of relays) one.on(name, (event) => void seen.push(event))
  return seen
}

describe('endpoint health', () => {
  it('opens the breaker after failures in a row: no request while open, by any relay, and the others go on', async () => {
    const down = await sink(() => ({ status: 503 }))
    const up = await sink()
    const { id } = await createSubscription(t.db, { url: down.url, name: 'health-down' })
    await createSubscription(t.db, { url: up.url, name: 'health-up' })
    for (let n = 0; n < 3; n++) await Promise.all(['b1', 'b2', 'b3', 'b4'].map((lane) => publish(lane, n)))
    const breaker = { failures: 6, cooldownMs: 600_000 }
    const register = new Registry()
    const first = relay({ endpointBreaker: breaker, concurrency: 4, metrics: { register } })
    const opened = collect([first], 'endpoint:opened')
    await first.start()
    await waitFor(() => opened.length === 1, 'the breaker to open')
    expect(opened[0]).toEqual({
      subscriptionId: id,
      name: 'health-down',
      reason: 'failures',
      failureStreak: 6,
      cooldownMs: 600_000,
    })
    await waitFor(() => up.requests.length === 12, 'the healthy subscription')
    const { endpoint } = (await getSubscription(t.db, id))!
    expect(endpoint.breaker).toBe('open')
    // Lanes claimed before it opened fail too, and still count.
    expect(endpoint.failureStreak).toBeGreaterThanOrEqual(6)
    // stats, its warnings and the metrics show it.
    const snapshot = await stats(t.db)
    expect(snapshot.subscriptions.find((sub) => sub.id === id)).toMatchObject({ breaker: 'open' })
    expect(snapshot.warnings.join('\n')).toMatch(/subscription health-down: its endpoint's breaker is open/)
    const text = await register.metrics()
    expect(
      metricValue(text, 'outbox_endpoint_transitions_total', '{subscription="health-down",to="open"}'),
    ).toBe(1)
    expect(metricValue(text, 'outbox_endpoints_open')).toBe(1)
    // Every relay, including one started now, leaves it alone until the cool-down ends: no attempt is burned.
    const requestsWhenOpened = down.requests.length
    await publish('b5')
    const second = relay({ endpointBreaker: breaker, concurrency: 4 })
    for (let pass = 0; pass < 3; pass++) await second.runOnce()
    await waitFor(() => up.requests.length === 13, 'the healthy subscription, again')
    // Lanes the first relay had claimed before the breaker opened may each have had one request in flight.
    expect(down.requests.length).toBeLessThanOrEqual(requestsWhenOpened + 4)
    const pending = await sql<{ n: string }>`
      SELECT count(*) AS n FROM outbox WHERE subscription_id = ${id}::uuid AND status = 'pending'`.execute(
      t.db,
    )
    expect(Number(pending.rows[0]!.n)).toBe(13)
  })

  it('sends one probe per cool-down across relays, doubling it while it fails, and closes on an answer', async () => {
    let healthy = false
    let inFlight = 0
    let mostInFlight = 0
    const endpoint = await sink(async () => {
      inFlight++
      mostInFlight = Math.max(mostInFlight, inFlight)
      await new Promise((resolve) => setTimeout(resolve, 20))
      inFlight--
      return healthy ? { status: 200 } : { status: 500 }
    })
    const { id } = await createSubscription(t.db, { url: endpoint.url, name: 'health-probe' })
    await Promise.all(['p1', 'p2', 'p3'].map((lane) => publish(lane)))
    const breaker = { failures: 3, cooldownMs: 150, maxCooldownMs: 400 }
    const three = [
      relay({ endpointBreaker: breaker }),
      relay({ endpointBreaker: breaker }),
      relay({ endpointBreaker: breaker }),
    ]
    const opened = collect(three, 'endpoint:opened')
    const probing = collect(three, 'endpoint:probing')
    const closed = collect(three, 'endpoint:closed')
    // From the first probe on (the requests of lanes claimed before it opened are over by then), every request is
    // a probe, and one is in flight at a time across the three relays.
    let afterOpen = Number.POSITIVE_INFINITY
    let mostWhileOpen = 0
    for (const one of three) {
      one.on('endpoint:probing', () => {
        if (afterOpen === Number.POSITIVE_INFINITY) {
          afterOpen = endpoint.requests.length
          mostInFlight = inFlight
        }
      })
      one.on('endpoint:closed', () => {
        mostWhileOpen = mostInFlight
      })
    }
    for (const one of three) await one.start()
    await waitFor(() => opened.some((event) => event.reason === 'failures'), 'the breaker to open')
    const reopened = () =>
      opened.filter((event) => event.reason === 'probe failed').map((event) => event.cooldownMs)
    await waitFor(() => reopened().length >= 2, 'two failed probes')
    // Each failed probe opens it again for twice the cool-down, up to the maximum.
    expect(reopened().slice(0, 3)).toEqual([300, 400, 400].slice(0, reopened().length))
    // (A probe is reported just before its request leaves, so the last one may not have arrived yet.)
    const probeRequests = endpoint.requests.length - afterOpen
    expect(probeRequests).toBeLessThanOrEqual(probing.length)
    expect(probeRequests).toBeGreaterThanOrEqual(probing.length - 1)
    healthy = true
    await waitFor(() => closed.length === 1, 'the breaker to close')
    await waitFor(
      () => new Set(endpoint.requests.slice(afterOpen).map((r) => r.json.aggregate_id)).size === 3,
      'all lanes',
    )
    // While open, one request at a time across the three relays: each a probe.
    expect(mostWhileOpen).toBe(1)
    expect(closed).toEqual([{ subscriptionId: id, name: 'health-probe' }])
    expect((await getSubscription(t.db, id))!.endpoint).toMatchObject({ breaker: 'closed', failureStreak: 0 })
  })

  it('a Retry-After slows every lane of that endpoint, not the other endpoints', async () => {
    let throttle = true
    const slowed = await sink(() =>
      throttle ? { status: 429, headers: { 'retry-after': '30' } } : { status: 200 },
    )
    const other = await sink()
    const { id } = await createSubscription(t.db, { url: slowed.url, name: 'health-429' })
    await createSubscription(t.db, { url: other.url, name: 'health-429-other' })
    await Promise.all(['r1', 'r2', 'r3'].map((lane) => publish(lane)))
    const one = relay({ concurrency: 1, endpointBreaker: false })
    // One lane at a time: the first request of the throttled endpoint gets the 429.
    while (slowed.requests.length === 0) await one.runOnce()
    const { throttledUntil } = (await getSubscription(t.db, id))!.endpoint
    expect(throttledUntil!.getTime() - Date.now()).toBeGreaterThan(20_000)
    throttle = false
    await one.runOnce()
    await one.runOnce()
    await one.runOnce()
    expect(other.requests).toHaveLength(3)
    expect(slowed.requests).toHaveLength(1)
    // enableSubscription is the operator's "try it now": it lifts the throttle, and every lane goes.
    await enableSubscription(t.db, id)
    await waitFor(async () => {
      await one.runOnce()
      // The lane that got the 429 waits its own Retry-After; the two others go at once.
      return new Set(slowed.requests.slice(1).map((request) => request.json.aggregate_id)).size === 2
    }, 'the throttled lanes after the reset')
  })

  it('the implicit endpoint has no breaker: it keeps retrying on its schedule', async () => {
    await enableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
    try {
      const endpoint = await sink(() => ({ status: 500 }))
      await publish('imp1')
      const implicit = relay({ endpoint: endpoint.url, endpointBreaker: { failures: 2 } })
      const opened = collect([implicit], 'endpoint:opened')
      await implicit.start()
      await waitFor(() => endpoint.requests.length >= 6, 'six attempts')
      expect(opened).toEqual([])
      await implicit.stop()
      await sql`DELETE FROM outbox WHERE subscription_id = ${IMPLICIT_SUBSCRIPTION_ID}::uuid`.execute(t.db)
    } finally {
      await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
    }
  })
})
