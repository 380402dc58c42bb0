import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { createSubscription, enqueue, type RelayOptions } from '../src/index.js'
import { relayTestHooks } from '../src/relay.js'
import { sequencesByAggregate, useStoredSubscriptions } from './stored-subscriptions.js'
import { deferred, waitFor, waitForLockWaiters } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t)

async function publish(aggregateType: string, aggregateId: string, eventType: string, n = 0) {
  await t.db
    .transaction()
    .execute((trx) => enqueue(trx, { aggregateType, aggregateId, eventType, payload: { n } }))
}

/**
 * A backlogged subscription (`ledger.*`, 40 lanes due) beside a quiet one (`order.*`) that has had its first event:
 * a relay at concurrency 2 claims for the backlog again and again. `maxInFlight` makes the backlog's claim lock its
 * subscription row, so a test holding that row's lock holds the claim loop's claim in flight. (A claim slow only
 * because of a backlog's size cannot be held in flight from outside: the express claims it starts were counted in a
 * probe of the backlog-fairness case, see the bench README.)
 */
async function backlogBesideQuiet(options: Partial<RelayOptions> = {}) {
  const backlogSink = await stored.sink()
  const quietSink = await stored.sink()
  const backlog = await createSubscription(t.db, {
    url: backlogSink.url,
    name: 'express-backlog',
    eventTypes: ['ledger.*'],
    maxInFlight: 1000,
  })
  await createSubscription(t.db, { url: quietSink.url, name: 'express-quiet', eventTypes: ['order.*'] })
  await publish('order', 'o1', 'order.created', 0)
  for (let lane = 0; lane < 40; lane++) await publish('account', `a${lane}`, 'ledger.entry')
  const relay = stored.relay({ concurrency: 2, listen: { connectionString: t.url }, ...options })
  await relay.start()
  await waitFor(() => relay.listening, 'the LISTEN connection')
  await waitFor(
    () => quietSink.requests.length === 1 && backlogSink.requests.length >= 4,
    'the quiet subscription to be drained and the backlog under way',
  )
  return { relay, backlog, backlogSink, quietSink }
}

/** Holds the lock of a subscription's row until `release` resolves; resolves `locked` once it is held. */
function holdSubscriptionRow(id: string) {
  const locked = deferred()
  const release = deferred()
  const done = t.db.transaction().execute(async (trx) => {
    await sql`SELECT 1 FROM outbox_subscription WHERE id = ${id}::uuid FOR UPDATE`.execute(trx)
    locked.resolve()
    await release.promise
  })
  return { locked: locked.promise, release: release.resolve, done }
}

describe('the express claim', () => {
  it("a quiet subscription's event is claimed beside a backlog's claim waiting for its row, not after it", async () => {
    const { relay, backlog, backlogSink, quietSink } = await backlogBesideQuiet()
    const row = holdSubscriptionRow(backlog.id)
    try {
      await row.locked
      // The claim loop's next claim includes the backlog: it waits for the row, and stays in flight.
      await waitForLockWaiters(t.db)
      const delivered = backlogSink.requests.length
      await publish('order', 'o2', 'order.created', 1)
      await waitFor(() => quietSink.requests.length === 2, "the quiet subscription's next event", 5000)
      // Claimed and sent by the express claim: the loop's claim is still waiting, and the backlog did not move.
      expect(relayTestHooks(relay).activity().claiming).toBe(true)
      expect(backlogSink.requests.length).toBeLessThanOrEqual(delivered + 2)
    } finally {
      row.release()
      await row.done
    }
    await waitFor(
      () => new Set(backlogSink.requests.map((request) => request.json.event_id)).size === 40,
      'the backlog, once its row is free',
    )
    for (const sequences of sequencesByAggregate(quietSink).values()) expect(sequences).toEqual([1])
    for (const sequences of sequencesByAggregate(backlogSink).values()) expect(sequences[0]).toBe(1)
  })

  it("a claim waiting for a limited subscription's row, held by another relay's claim, does not hold a quiet one back", async () => {
    const limitedSink = await stored.sink()
    const quietSink = await stored.sink()
    const limited = await createSubscription(t.db, {
      url: limitedSink.url,
      name: 'express-limited',
      eventTypes: ['ledger.*'],
      ratePerSecond: 1000,
    })
    await createSubscription(t.db, { url: quietSink.url, name: 'express-quiet', eventTypes: ['order.*'] })
    const relay = stored.relay({ concurrency: 2, listen: { connectionString: t.url } })
    await relay.start()
    await waitFor(() => relay.listening, 'the LISTEN connection')
    await publish('account', 'a1', 'ledger.entry')
    await waitFor(() => limitedSink.requests.length === 1, "the limited subscription's event")
    // Another relay's claim of the limited subscription, holding its row (the token bucket is spent under it).
    const row = holdSubscriptionRow(limited.id)
    try {
      await row.locked
      await publish('order', 'q1', 'order.created')
      // The loop's claim offers the limited subscription room too: it waits for the row.
      await waitForLockWaiters(t.db)
      await publish('order', 'q2', 'order.created')
      await waitFor(
        () => quietSink.requests.length === 2,
        'both quiet events, beside the waiting claim',
        5000,
      )
      expect(relayTestHooks(relay).activity().claiming).toBe(true)
    } finally {
      row.release()
      await row.done
    }
    await publish('account', 'a1', 'ledger.entry', 1)
    await waitFor(() => limitedSink.requests.length === 2, "the limited subscription's next event")
  })

  it("spends only what the backlog's claim left of the byte budget: an event larger than that goes back unopened", async () => {
    const budget = 16_384
    const { relay, backlog, quietSink } = await backlogBesideQuiet({ maxBufferedBytes: budget })
    let worst = 0
    const sample = setInterval(() => {
      worst = Math.max(worst, relayTestHooks(relay).activity().heldBytes)
    }, 1)
    const row = holdSubscriptionRow(backlog.id)
    try {
      await row.locked
      await waitForLockWaiters(t.db)
      await publish('order', 'small', 'order.created', 1)
      await waitFor(() => quietSink.requests.length === 2, 'the small event, through the express claim', 5000)
      // Larger than the whole budget: only the loop's claim may take it (alone), never the express claim.
      await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'large',
          eventType: 'order.created',
          payload: 'x'.repeat(budget + 1),
        }),
      )
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(quietSink.requests).toHaveLength(2)
    } finally {
      row.release()
      await row.done
      await waitFor(() => quietSink.requests.length === 3, 'the large event, once the loop claims again')
      clearInterval(sample)
    }
    expect(worst).toBeGreaterThan(0)
    expect(worst).toBeLessThanOrEqual(budget + budget + 64)
  })

  it('without a NOTIFY the quiet subscription waits for the loop: the express claim answers wake-ups only', async () => {
    const { backlog, quietSink } = await backlogBesideQuiet()
    const row = holdSubscriptionRow(backlog.id)
    try {
      await row.locked
      await waitForLockWaiters(t.db)
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(
            trx,
            { aggregateType: 'order', aggregateId: 'o3', eventType: 'order.created', payload: {} },
            { notify: false },
          ),
        )
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(quietSink.requests).toHaveLength(1)
    } finally {
      row.release()
      await row.done
    }
    await waitFor(() => quietSink.requests.length === 2, 'the event, at the next claim of the loop')
  })
})
