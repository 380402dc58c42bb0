import { type Sink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  type EnqueueInput,
  enqueueMany,
  getSubscription,
  listSubscriptions,
  updateSubscription,
} from '../src/index.js'
import { systemClock } from '../src/runtime.js'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { sequencesByAggregate, useStoredSubscriptions } from './stored-subscriptions.js'
import { countingClaims, outboxRowsRead, waitFor } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 50 }, () =>
  sql`TRUNCATE outbox, outbox_lane, outbox_delivery_attempt`.execute(t.db),
)

/** Enqueues `perAggregate` events to each of `aggregates` aggregates named `<prefix><n>`, in one transaction. */
async function backlog(prefix: string, aggregates: number, perAggregate = 1): Promise<void> {
  const events: EnqueueInput[] = []
  for (let n = 0; n < perAggregate; n++) {
    for (let a = 0; a < aggregates; a++) {
      events.push({
        aggregateType: 'order',
        aggregateId: `${prefix}${a}`,
        eventType: 'order.updated',
        payload: { n },
      })
    }
  }
  await t.db.transaction().execute((trx) => enqueueMany(trx, events))
}

/**
 * The bucket's bound on any window of receipts: a burst of one second's worth (at least 1) plus the rate times the
 * window, plus the tokens of `slackMs` more. The slack is the time between a claim spending a token (its database
 * clock) and the sink recording the request it allowed (the claim's commit and return, the request's trip, the
 * event loop of this process): requests allowed just before a window may land inside it.
 */
function mostInWindow(ratePerSecond: number, windowMs: number, slackMs: number): number {
  return Math.max(1, ratePerSecond) + (ratePerSecond * (windowMs + slackMs)) / 1000
}

/** The largest excess of receipts over the bucket's bound, over every window between two receipts (≤ 0 holds). */
function worstWindow(target: Sink, ratePerSecond: number, slackMs: number): number {
  const times = target.requests.map((request) => request.at).sort((a, b) => a - b)
  let worst = Number.NEGATIVE_INFINITY
  for (let i = 0; i < times.length; i++) {
    for (let j = i; j < times.length; j++) {
      worst = Math.max(worst, j - i + 1 - mostInWindow(ratePerSecond, times[j]! - times[i]!, slackMs))
    }
  }
  return worst
}

/** Rows still pending for a subscription. */
async function pendingOf(subscriptionId: string): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    SELECT count(*) AS n FROM outbox WHERE subscription_id = ${subscriptionId}::uuid AND status = 'pending'`.execute(
    t.db,
  )
  return Number(rows[0]!.n)
}

describe('ratePerSecond', () => {
  it('two relays on separate pools never send one subscription more than its bucket allows, in order per lane', async () => {
    const rate = 20
    const target = await stored.sink()
    await createSubscription(t.db, { url: target.url, ratePerSecond: rate })
    await backlog('rl', 50, 2)
    const relays = [
      stored.relay({ db: t.connect({ max: 4 }), concurrency: 8 }),
      stored.relay({ db: t.connect({ max: 4 }), concurrency: 8 }),
    ]
    const byRelay = relays.map(() => 0)
    for (const [index, relay] of relays.entries()) {
      relay.on('delivery:success', () => {
        byRelay[index]! += 1
      })
    }
    const started = performance.now()
    await Promise.all(relays.map((relay) => relay.start()))
    // 100 requests at 20/s after a burst of 20 take about 4 s; without the rate they take a few ms.
    await waitFor(() => target.requests.length === 100, 'every event, at the rate', 30_000)
    const elapsedMs = performance.now() - started
    expect(worstWindow(target, rate, 1000)).toBeLessThanOrEqual(0)
    // The bound is not vacuous: at a rate the whole backlog takes about (100 - 20) / 20 s.
    expect(elapsedMs).toBeGreaterThan(((100 - rate) / rate - 1) * 1000)
    // Both relays took part, and each lane's events came in sequence order.
    expect(byRelay.every((count) => count > 0)).toBe(true)
    for (const sequences of sequencesByAggregate(target).values()) expect(sequences).toEqual([1, 2])
  }, 120_000)

  it('a subscription without a rate beside a rate-limited one is not slowed: it drains while the other is throttled', async () => {
    const rate = 2
    const [limited, free] = [await stored.sink(), await stored.sink()]
    const slow = await createSubscription(t.db, { url: limited.url, ratePerSecond: rate })
    await createSubscription(t.db, { url: free.url })
    // Both subscriptions receive every event: 150 aggregates, 2 events each.
    await backlog('nb', 150, 2)
    const relay = stored.relay({ concurrency: 8 })
    const started = performance.now()
    await relay.start()
    await waitFor(() => free.requests.length === 300, 'the subscription without a rate', 20_000)
    const elapsedMs = performance.now() - started
    // The limited one is still throttled: it got what its bucket allows in that time, far from its 300 events.
    expect(limited.requests.length).toBeLessThanOrEqual(mostInWindow(rate, elapsedMs, 1000))
    expect(await pendingOf(slow.id)).toBeGreaterThan(0)
    expect(worstWindow(limited, rate, 1000)).toBeLessThanOrEqual(0)
    for (const sequences of sequencesByAggregate(free).values()) expect(sequences).toEqual([1, 2])
  }, 120_000)

  it('a claim reads none of the due rows of a subscription out of tokens, and reports no full window for it', async () => {
    const target = await stored.sink()
    const { id } = await createSubscription(t.db, { url: target.url, ratePerSecond: 1 })
    await backlog('tk', 2000)
    /**
     * One claim for the subscription, with the outbox rows and index entries it read: this backend's counters read
     * before and after it in one transaction (they also hold reads not yet flushed to the statistics).
     */
    const claim = () =>
      t.db.transaction().execute(async (trx) => {
        const before = await outboxRowsRead(trx)
        const result = await claimLanes(
          { db: trx, schema: 'public' },
          {
            subscriptions: [{ id, room: 16 }],
            lanes: 16,
            leaseMs: 30_000,
            scanRows: 256,
            batchSize: 10,
            maxBytes: 1 << 20,
            clock: systemClock,
          },
        )
        return { ...result, rowsRead: (await outboxRowsRead(trx)) - before }
      })
    // A full bucket holds one token: one lane, with one event, and its window (8 rows for a room of 1) filled up —
    // but not reported, since the rate bounded its room.
    const first = await claim()
    expect(first.lanes).toHaveLength(1)
    expect(first.lanes[0]!.events).toHaveLength(1)
    expect(first.windowFull).toBe(false)
    expect(first.rowsRead).toBeGreaterThan(0)
    // Out of tokens: room 0, so none of its 1999 due rows is read.
    const second = await claim()
    expect(second).toMatchObject({ lanes: [], windowFull: false, rowsRead: 0 })
    const { rows } = await sql<{ rate_tokens: number }>`
      SELECT rate_tokens FROM outbox_subscription WHERE id = ${id}::uuid`.execute(t.db)
    expect(rows[0]!.rate_tokens).toBeLessThan(1)
    await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL`.execute(t.db)
  })

  it('a relay waiting for tokens waits for its poll interval: a few claims per interval, not a hot loop', async () => {
    const rate = 5
    const pollIntervalMs = 100
    const target = await stored.sink()
    await createSubscription(t.db, { url: target.url, ratePerSecond: rate })
    await backlog('hl', 300)
    const counting = countingClaims(t.url)
    const relay = stored.relay({ db: counting.db, concurrency: 8, pollIntervalMs })
    try {
      const started = performance.now()
      await relay.start()
      await waitFor(() => target.requests.length >= 15, 'fifteen requests at 5/s', 60_000)
      const elapsedMs = performance.now() - started
      await relay.stop()
      const intervals = elapsedMs / pollIntervalMs
      // Per interval: the poll's claim, and when it took a lane, the wake-up of that lane finishing (a token comes
      // every other interval here). A relay claiming again whenever the due scan filled up would add one more per
      // token; one spinning while tokens are out would claim thousands of times.
      expect(counting.claims()).toBeGreaterThan(0)
      expect(counting.claims()).toBeLessThanOrEqual(2 * (intervals + 1))
      expect(target.requests.length).toBeLessThanOrEqual(mostInWindow(rate, elapsedMs, 1000))
    } finally {
      await counting.db.destroy()
    }
  }, 120_000)

  it('updateSubscription to null lifts the rate at once, and setting one again brings it back', async () => {
    const target = await stored.sink()
    const { id } = await createSubscription(t.db, { url: target.url, ratePerSecond: 0.5 })
    await backlog('up', 60)
    const relay = stored.relay({ concurrency: 8 })
    await relay.start()
    // One request (the bucket's one token), then one every 2 s.
    await waitFor(() => target.requests.length >= 1, 'the first request')
    expect(target.requests.length).toBeLessThan(5)
    expect((await updateSubscription(t.db, id, { ratePerSecond: null })).ratePerSecond).toBeNull()
    const lifted = performance.now()
    await waitFor(() => target.requests.length === 60, 'the rest at once', 90_000)
    // At 0.5/s the rest would take about two minutes; lifted, they take well under a second on an idle machine, and
    // half of those two minutes leaves any load room.
    expect(performance.now() - lifted).toBeLessThan(60_000)
    expect((await updateSubscription(t.db, id, { ratePerSecond: 3 })).ratePerSecond).toBe(3)
    const before = target.requests.length
    const resumed = performance.now()
    await backlog('up', 60)
    // A burst of 3, then 3/s: nine requests take at least about two seconds (less a second of slack).
    await waitFor(() => target.requests.length >= before + 9, 'events at the new rate')
    expect(performance.now() - resumed).toBeGreaterThan(1000)
    const again = { ...target, requests: target.requests.slice(before) }
    expect(worstWindow(again, 3, 1000)).toBeLessThanOrEqual(0)
    expect(await pendingOf(id)).toBeGreaterThan(0)
  }, 120_000)

  it('refuses a rate that is not a positive finite number within bounds, naming the option, storing nothing', async () => {
    const before = (await listSubscriptions(t.db)).length
    for (const ratePerSecond of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 10_001, 0.0001, '5', true]) {
      await expect(
        createSubscription(t.db, { url: 'https://x/h', ratePerSecond: ratePerSecond as never }),
      ).rejects.toMatchObject({
        code: 'ERR_OUTBOX_INVALID_OPTION',
        option: 'ratePerSecond',
        message: expect.stringMatching(
          /ratePerSecond must be a number of requests per second from 0.001 to 10000/,
        ),
      })
    }
    expect((await listSubscriptions(t.db)).length).toBe(before)
    const { id } = await createSubscription(t.db, { url: 'https://x/h', ratePerSecond: 0.5 })
    expect(await getSubscription(t.db, id)).toMatchObject({ ratePerSecond: 0.5 })
    await expect(updateSubscription(t.db, id, { ratePerSecond: 0 })).rejects.toMatchObject({
      option: 'ratePerSecond',
    })
    expect(await getSubscription(t.db, id)).toMatchObject({ ratePerSecond: 0.5 })
    expect(await updateSubscription(t.db, id, { ratePerSecond: 10_000 })).toMatchObject({
      ratePerSecond: 10_000,
    })
  })
})
