import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  enqueue,
  enqueueMany,
  type RelayOptions,
  type ReplayProgress,
  replay,
} from '../src/index.js'
import { sequencesByAggregate, useStoredSubscriptions } from './stored-subscriptions.js'
import { deferred, waitFor } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 20 }, () =>
  sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db),
)
const sink = stored.sink
/** Relays on pools of their own, as separate processes would be. */
const storedRelay = (options: Partial<RelayOptions> = {}) =>
  stored.relay({ db: t.connect({ max: 4 }), ...options })

async function publish(aggregateId: string, count = 1): Promise<void> {
  for (let n = 0; n < count; n++) {
    await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
      )
  }
}

async function statuses(aggregateId: string): Promise<string[]> {
  const { rows } = await sql<{ status: string }>`
    SELECT status FROM outbox WHERE aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  return rows.map((row) => row.status)
}

describe('replay against relays and enqueues', () => {
  it('leaves a lane under a live lease untouched until the lease ends, then replays it', async () => {
    const target = await sink()
    await createSubscription(t.db, { url: target.url, name: 'leased' })
    await publish('held', 2)
    await publish('free', 2)
    await storedRelay().runOnce()
    expect(target.requests).toHaveLength(4)
    // Another relay's live claim, as the claim writes it.
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      WHERE aggregate_id = 'held'`.execute(t.db)

    const firstPass = deferred<ReplayProgress>()
    const steps: ReplayProgress[] = []
    const replaying = replay(t.connect({ max: 1 }), {
      subscriptionId: 'leased',
      since: '1h',
      onProgress: (step) => {
        steps.push(step)
        if (steps.length === 1) firstPass.resolve(step)
      },
    })
    expect(await firstPass.promise).toEqual({ aggregates: 1, events: 2, pendingLeased: 1 })
    expect(await statuses('free')).toEqual(['pending', 'pending'])
    expect(await statuses('held')).toEqual(['sent', 'sent'])
    // Tried again while it waits, and still not touched.
    await waitFor(() => steps.length >= 3, 'two more tries of the leased lane')
    expect(await statuses('held')).toEqual(['sent', 'sent'])

    await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL WHERE aggregate_id = 'held'`.execute(
      t.db,
    )
    expect(await replaying).toEqual({ aggregates: 2, events: 4, skippedLeased: 0, complete: true })
    expect(await statuses('held')).toEqual(['pending', 'pending'])
    expect(steps.at(-1)).toEqual({ aggregates: 2, events: 4, pendingLeased: 0 })
  })

  it('gives up on a lane still leased after leaseWaitMs, and stops when its signal aborts', async () => {
    const target = await sink()
    await createSubscription(t.db, { url: target.url, name: 'given-up' })
    await publish('stuck', 2)
    await publish('other', 1)
    await storedRelay().runOnce()
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      WHERE aggregate_id = 'stuck'`.execute(t.db)
    expect(await replay(t.db, { subscriptionId: 'given-up', since: '1h', leaseWaitMs: 300 })).toEqual({
      aggregates: 1,
      events: 1,
      skippedLeased: 1,
      complete: false,
    })
    expect(await statuses('stuck')).toEqual(['sent', 'sent'])

    const controller = new AbortController()
    const aborted = replay(t.db, {
      subscriptionId: 'given-up',
      since: '1h',
      onProgress: () => controller.abort(),
      signal: controller.signal,
    })
    expect(await aborted).toMatchObject({ skippedLeased: 1, complete: false })
    await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL`.execute(t.db)
  })

  it('never replays a lane while a relay delivers it: a hanging request holds the replay back, in order after it', async () => {
    const answer = deferred()
    const target = await sink(async (request) => {
      if (request.json.sequence === 3 && target.requests.length === 3) await answer.promise
      return { status: 200, body: { status: 'applied' } }
    })
    await createSubscription(t.db, { url: target.url, name: 'hanging', requestTimeoutMs: 20_000 })
    await publish('slow', 2)
    const relay = storedRelay({ leaseMs: 30_000 })
    await relay.start()
    await waitFor(() => target.requests.length === 2, 'the first two events')
    await publish('slow')
    await waitFor(() => target.requests.length === 3, 'the third event in flight')

    const firstPass = deferred()
    const replaying = replay(t.connect({ max: 1 }), {
      subscriptionId: 'hanging',
      since: '1h',
      onProgress: ({ pendingLeased }) => {
        if (pendingLeased === 1) firstPass.resolve()
      },
    })
    await firstPass.promise
    expect(await statuses('slow')).toEqual(['sent', 'sent', 'pending'])
    answer.resolve()
    expect(await replaying).toMatchObject({ aggregates: 1, events: 3, complete: true })
    await waitFor(() => target.requests.length === 6, 'the replayed events')
    expect(sequencesByAggregate(target).get('slow')).toEqual([1, 2, 3, 1, 2, 3])
  })

  it('loses nothing and keeps order while enqueues of the same aggregates race it, a relay delivering throughout', async () => {
    const target = await sink()
    await createSubscription(t.db, { url: target.url, name: 'raced' })
    const ids = Array.from({ length: 12 }, (_, n) => `race${n}`)
    for (const id of ids) await publish(id, 3)
    const relay = storedRelay({ concurrency: 8 })
    await relay.start()
    await waitFor(() => target.requests.length === 36, 'the first events')

    // Five more events per aggregate: single enqueues from one pool, enqueueMany over every aggregate (shuffled)
    // from another, each a transaction of its own, while the replay walks the aggregates one per batch.
    const other = t.connect({ max: 4 })
    const singles = (async () => {
      for (let round = 0; round < 3; round++) {
        await Promise.all(ids.map((id) => publish(id)))
      }
    })()
    const batches = (async () => {
      for (let round = 0; round < 2; round++) {
        const shuffled = [...ids].sort(() => Math.random() - 0.5)
        await other.transaction().execute((trx) =>
          enqueueMany(
            trx,
            shuffled.map((id) => ({
              aggregateType: 'order',
              aggregateId: id,
              eventType: 'order.updated',
              payload: { round },
            })),
          ),
        )
      }
    })()
    const replayed = replay(t.connect({ max: 1 }), { subscriptionId: 'raced', since: '1h', batchSize: 1 })
    const [result] = await Promise.all([replayed, singles, batches])
    expect(result).toMatchObject({ aggregates: 12, skippedLeased: 0, complete: true })
    const total = 12 * 8 + result.events
    await waitFor(() => target.requests.length === total, 'every event and every replayed one')

    // Per aggregate: 1..m (the first deliveries before the replay reached it), then the replayed events in one
    // piece and in order (those of 1..m created before the replay began: 1..3 at least), then m+1..8. Nothing lost,
    // nothing out of order, nothing else sent twice.
    let replayedEvents = 0
    for (const id of ids) {
      const stream = sequencesByAggregate(target).get(id)!
      const replayStart = stream.indexOf(1, 1)
      const m = replayStart
      expect(stream.slice(0, m)).toEqual(Array.from({ length: m }, (_, n) => n + 1))
      let replayEnd = replayStart + 1
      while (
        replayEnd < stream.length &&
        stream[replayEnd]! <= m &&
        stream[replayEnd]! > stream[replayEnd - 1]!
      ) {
        replayEnd++
      }
      const replayedBlock = stream.slice(replayStart, replayEnd)
      expect(replayedBlock.slice(0, 3)).toEqual([1, 2, 3])
      expect(stream.slice(replayEnd)).toEqual(Array.from({ length: 8 - m }, (_, n) => m + n + 1))
      replayedEvents += replayedBlock.length
    }
    expect(replayedEvents).toBe(result.events)
  })
})
