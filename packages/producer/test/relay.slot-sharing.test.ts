import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { createSubscription, enqueue, type RelayEventMap } from '../src/index.js'
import { relayTestHooks } from '../src/relay.js'
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
