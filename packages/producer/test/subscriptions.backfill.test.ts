import { type SinkRequest, useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  checkIntegrity,
  createSubscription,
  deleteSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  enqueueMany,
  getSubscription,
  listSubscriptions,
  prune,
  type RelayEventMap,
  updateSubscription,
} from '../src/index.js'
import { relayTestHooks } from '../src/relay.js'
import { runBackfillBatch } from '../src/sql/backfill-batch.js'
import { useStoredSubscriptions } from './stored-subscriptions.js'
import { deferred, waitFor, waitForLockWaiters } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 50 }, () =>
  sql`TRUNCATE outbox, outbox_counter, outbox_lane, outbox_delivery_attempt`.execute(t.db),
)

interface Published {
  readonly aggregateId: string
  readonly sequence: number
  readonly eventId: string
  readonly eventType: string
  readonly tenant: string | null
}

async function publish(
  aggregateId: string,
  eventType = 'order.updated',
  tenant?: string,
  db: Kysely<any> = t.db,
): Promise<Published> {
  const event = await db.transaction().execute((trx) =>
    enqueue(trx, {
      aggregateType: 'order',
      aggregateId,
      eventType,
      payload: { aggregateId, eventType },
      ...(tenant === undefined ? {} : { tenant }),
    }),
  )
  return { aggregateId, sequence: event.sequence, eventId: event.eventId, eventType, tenant: tenant ?? null }
}

/** `count` aggregates `prefix0…` with one event each, in one transaction (enqueueMany). */
async function manyAggregates(prefix: string, count: number): Promise<void> {
  await t.db.transaction().execute((trx) =>
    enqueueMany(
      trx,
      Array.from({ length: count }, (_, n) => ({
        aggregateType: 'order',
        aggregateId: `${prefix}${String(n).padStart(5, '0')}`,
        eventType: 'order.created',
        payload: { n },
      })),
    ),
  )
}

/** The retained events (some row of each exists), one per (aggregate, sequence). */
async function retained(): Promise<Published[]> {
  const { rows } = await sql<{
    aggregate_id: string
    sequence: string
    event_id: string
    event_type: string
    tenant: string | null
  }>`
    SELECT DISTINCT ON (aggregate_id, sequence) aggregate_id, sequence, event_id, event_type, tenant
    FROM outbox ORDER BY aggregate_id, sequence`.execute(t.db)
  return rows.map((row) => ({
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    eventId: row.event_id,
    eventType: row.event_type,
    tenant: row.tenant,
  }))
}

/** Per aggregate, the event ids in sequence order. */
function byAggregate(events: readonly Published[]): Map<string, string[]> {
  const lanes = new Map<string, Published[]>()
  for (const event of events) lanes.set(event.aggregateId, [...(lanes.get(event.aggregateId) ?? []), event])
  return new Map(
    [...lanes].map(([id, list]) => [
      id,
      [...list].sort((a, b) => a.sequence - b.sequence).map((event) => event.eventId),
    ]),
  )
}

/** Per aggregate, the event ids a sink received, in arrival order. */
function received(requests: readonly SinkRequest[]): Map<string, string[]> {
  const lanes = new Map<string, string[]>()
  for (const request of requests) {
    const id = request.json.aggregate_id as string
    lanes.set(id, [...(lanes.get(id) ?? []), request.json.event_id as string])
  }
  return lanes
}

function sorted(map: Map<string, string[]>): [string, string[]][] {
  return [...map].sort(([a], [b]) => a.localeCompare(b))
}

async function subscriptionRows(id: string): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    SELECT (SELECT count(*) FROM outbox WHERE subscription_id = ${id}::uuid)
         + (SELECT count(*) FROM outbox_lane WHERE subscription_id = ${id}::uuid) AS n`.execute(t.db)
  return Number(rows[0]!.n)
}

async function lockWaiters(): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    SELECT count(*) AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(t.db)
  return Number(rows[0]!.n)
}

async function backfillState(id: string) {
  return (await getSubscription(t.db, id))?.backfill
}

/** A sink that counts the requests that arrived while its subscription's backfill had not finished. */
async function gatedSink(idOf: () => string | undefined) {
  const early = { count: 0 }
  const target = await stored.sink(async () => {
    const id = idOf()
    if (id !== undefined && (await backfillState(id))?.state !== 'done') early.count += 1
    return { status: 200, body: { status: 'applied' } }
  })
  return { target, early }
}

describe("createSubscription({ startAt: 'earliest' })", () => {
  it('delivers every retained matching event, then what came after, per aggregate in order, once, and only once the copy is done', async () => {
    // History: an event no subscription wanted (not retained), then an earlier subscription that delivered some
    // (later pruned), delivered more (kept as sent), dead-lettered one and holds some pending.
    await publish('h-none', 'order.created')
    const earlierSink = await stored.sink((request) =>
      request.json.aggregate_id === 'h-dead' ? { status: 500 } : { status: 200, body: { status: 'applied' } },
    )
    const earlier = await createSubscription(t.db, {
      url: earlierSink.url,
      name: 'earlier',
      retrySchedule: [],
    })
    for (const id of ['h1', 'h2']) await publish(id, 'order.created', 'acme')
    const relay = stored.relay()
    await relay.runOnce()
    await prune(t.db, { retention: 0 })
    for (const id of ['h1', 'h2', 'h3']) await publish(id, 'order.updated', 'acme')
    await publish('h3', 'invoice.paid', 'other')
    await publish('h-dead', 'order.created', 'acme')
    await relay.runOnce()
    await disableSubscription(t.db, earlier.id)
    await publish('h1', 'order.shipped', 'acme')
    await publish('h4', 'invoice.paid')
    const before = await retained()
    const { rows: statuses } = await sql<{ status: string }>`SELECT DISTINCT status FROM outbox`.execute(t.db)
    expect(statuses.map((row) => row.status).sort()).toEqual(['dead', 'pending', 'sent'])
    expect(before.map((event) => event.aggregateId)).not.toContain('h-none')

    let allId: string | undefined
    let acmeId: string | undefined
    const all = await gatedSink(() => allId)
    const acme = await gatedSink(() => acmeId)
    allId = (await createSubscription(t.db, { url: all.target.url, name: 'all', startAt: 'earliest' })).id
    acmeId = (
      await createSubscription(t.db, {
        url: acme.target.url,
        name: 'acme-orders',
        tenant: 'acme',
        eventTypes: ['order.*'],
        startAt: 'earliest',
      })
    ).id
    expect(await backfillState(allId)).toMatchObject({ state: 'running', events: 0, finishedAt: null })
    // Committed after creation, before any batch ran: fanned out by enqueue, delivered after the copied ones.
    const after = [
      await publish('h1', 'order.updated', 'acme'),
      await publish('h5', 'order.created', 'acme'),
      await publish('h-none', 'order.updated'),
    ]

    const progress: RelayEventMap['subscription:backfill'][] = []
    const serving = stored.relay({ concurrency: 4 })
    serving.on('subscription:backfill', (event) => progress.push(event))
    await serving.start()
    const wantAll = [...before, ...after]
    const wantAcme = wantAll.filter(
      (event) => event.tenant === 'acme' && event.eventType.startsWith('order.'),
    )
    await waitFor(
      () => all.target.requests.length === wantAll.length && acme.target.requests.length === wantAcme.length,
      'both backfilled subscriptions',
    )
    expect(sorted(received(all.target.requests))).toEqual(sorted(byAggregate(wantAll)))
    expect(sorted(received(acme.target.requests))).toEqual(sorted(byAggregate(wantAcme)))
    expect(all.early.count).toBe(0)
    expect(acme.early.count).toBe(0)
    // The copies carry the original sequence, type and payload.
    const copied = all.target.requests.find((request) => request.json.aggregate_id === 'h3')!
    expect(copied.json).toMatchObject({ sequence: 1, type: 'order.updated', data: { aggregateId: 'h3' } })

    const { rows: counters } = await sql<{ n: string }>`SELECT count(*) AS n FROM outbox_counter`.execute(
      t.db,
    )
    expect(await backfillState(allId)).toMatchObject({
      state: 'done',
      aggregatesDone: Number(counters[0]!.n),
      aggregatesTotal: Number(counters[0]!.n),
      events: before.length,
      waitingSince: null,
    })
    expect((await backfillState(allId))!.finishedAt).toBeInstanceOf(Date)
    expect(await backfillState(acmeId)).toMatchObject({
      state: 'done',
      events: before.filter((event) => event.tenant === 'acme' && event.eventType.startsWith('order.'))
        .length,
    })
    expect(
      progress
        .filter((event) => event.state === 'done')
        .map((event) => event.name)
        .sort(),
    ).toEqual(['acme-orders', 'all'])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
  })

  it('is refused with a clear error for any other startAt, and losing nothing', async () => {
    for (const startAt of ['later', 'EARLIEST', 0, null]) {
      await expect(
        createSubscription(t.db, { url: 'https://acme.example/hooks', startAt: startAt as never }),
      ).rejects.toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'startAt' })
    }
    expect((await listSubscriptions(t.db)).filter((subscription) => !subscription.implicit)).toEqual([])
    const now = await createSubscription(t.db, { url: 'https://acme.example/hooks', startAt: 'now' })
    expect(await backfillState(now.id)).toBeNull()
  })

  it('copies in bounded batches: an aggregate longer than the row budget goes over several, each once', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    for (let n = 0; n < 7; n++) await publish('long', 'order.updated')
    await publish('short-a')
    await publish('short-b')
    const { id } = await createSubscription(t.db, { url: 'https://copy.example/hooks', startAt: 'earliest' })
    const batch = () =>
      runBackfillBatch(
        { db: t.db, schema: 'public' },
        { subscriptionId: id, aggregates: 2, rows: 3, lockTimeoutMs: 500 },
      )
    const outcomes = []
    for (let n = 0; n < 10; n++) {
      const result = await batch()
      outcomes.push([result.outcome, result.copied])
      if (result.outcome === 'done') break
    }
    // 'long' takes three batches of at most 3 rows (3, 3, then 1 with 'short-a'), 'short-b' one more.
    expect(outcomes).toEqual([
      ['copied', 3],
      ['copied', 3],
      ['copied', 2],
      ['done', 1],
    ])
    expect((await batch()).outcome).toBe('none')
    const { rows } = await sql<{ aggregate_id: string; sequences: string[] }>`
      SELECT aggregate_id, array_agg(sequence ORDER BY sequence) AS sequences FROM outbox
      WHERE subscription_id = ${id}::uuid GROUP BY aggregate_id ORDER BY aggregate_id`.execute(t.db)
    expect(rows.map((row) => [row.aggregate_id, row.sequences.map(Number)])).toEqual([
      ['long', [1, 2, 3, 4, 5, 6, 7]],
      ['short-a', [1]],
      ['short-b', [1]],
    ])
    expect(await backfillState(id)).toMatchObject({ state: 'done', aggregatesDone: 3, events: 9 })
    await deleteSubscription(t.db, source.id)
  })

  it('an enqueue left open on an aggregate stalls the batch (reported once), which retries and finishes once it commits', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await publish('s1')
    await publish('s2')
    await disableSubscription(t.db, source.id)
    let id: string | undefined
    const copy = await gatedSink(() => id)
    id = (await createSubscription(t.db, { url: copy.target.url, startAt: 'earliest' })).id
    // An enqueue of s1 opened after the subscription exists, held open across the backfill's batches.
    const holder = t.connect({ max: 1 })
    const release = deferred()
    const entered = deferred<number>()
    const held = holder.transaction().execute(async (trx) => {
      const event = await enqueue(trx, {
        aggregateType: 'order',
        aggregateId: 's1',
        eventType: 'order.updated',
        payload: {},
      })
      entered.resolve(event.sequence)
      await release.promise
    })
    const lateSequence = await entered.promise
    onTestFinished(async () => {
      release.resolve()
      await held
    })
    const waiting: RelayEventMap['subscription:backfill:waiting'][] = []
    const relay = stored.relay()
    relay.on('subscription:backfill:waiting', (event) => waiting.push(event))
    await relay.start()
    await waitFor(() => waiting.length > 0, 'the stall reported')
    const stalled = await backfillState(id)
    expect(stalled).toMatchObject({ state: 'running', events: 0 })
    expect(stalled!.waitingSince).toBeInstanceOf(Date)
    // The relay tries again (its batch waits on the lock once more) and gives up again, without a second report.
    await waitForLockWaiters(t.db)
    await waitFor(async () => (await lockWaiters()) === 0, 'the retry to give up')
    expect(waiting).toHaveLength(1)
    expect(copy.target.requests).toHaveLength(0)
    expect(await subscriptionRows(id)).toBe(0) // nothing copied (the held enqueue's own row is not committed)
    release.resolve()
    await held
    await waitFor(() => copy.target.requests.length === 3, 'every event after the stall')
    const s1 = copy.target.requests.filter((request) => request.json.aggregate_id === 's1')
    expect(s1.map((request) => request.json.sequence)).toEqual([1, lateSequence])
    expect(copy.early.count).toBe(0)
    expect(await backfillState(id)).toMatchObject({ state: 'done', waitingSince: null, events: 2 })
  })

  it('copies what is retained when each batch runs: enqueues before and after the batch reaches them, and a prune between batches', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    for (const id of ['a0', 'a1', 'a2', 'a3', 'a4', 'a5']) {
      await publish(id, 'order.created')
      await publish(id, 'order.updated')
    }
    await sql`UPDATE outbox SET status = 'sent', sent_at = now()`.execute(t.db)
    const { id } = await createSubscription(t.db, { url: 'https://copy.example/hooks', startAt: 'earliest' })
    const batch = () =>
      runBackfillBatch(
        { db: t.db, schema: 'public' },
        { subscriptionId: id, aggregates: 2, rows: 100, lockTimeoutMs: 500 },
      )
    expect((await batch()).outcome).toBe('copied') // a0, a1
    await publish('a0') // after its batch: fanned out above the copies
    await publish('a4') // before its batch: the copies go below it
    await sql`UPDATE outbox SET sent_at = now() - interval '2 hours' WHERE aggregate_id = 'a3'`.execute(t.db)
    expect((await prune(t.db, { retention: '1h' })).removed).toBe(2)
    while ((await batch()).outcome !== 'done') {}
    const { rows } = await sql<{ aggregate_id: string; sequences: string[] }>`
      SELECT aggregate_id, array_agg(sequence ORDER BY sequence) AS sequences FROM outbox
      WHERE subscription_id = ${id}::uuid GROUP BY aggregate_id ORDER BY aggregate_id`.execute(t.db)
    expect(rows.map((row) => [row.aggregate_id, row.sequences.map(Number)])).toEqual([
      ['a0', [1, 2, 3]],
      ['a1', [1, 2]],
      ['a2', [1, 2]],
      ['a4', [1, 2, 3]],
      ['a5', [1, 2]],
    ])
    expect(await backfillState(id)).toMatchObject({ state: 'done', aggregatesDone: 6, events: 10 })
    expect((await checkIntegrity(t.db)).violations).toEqual([])
  })

  it('a disabled subscription is copied for, and delivers in order once enabled', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    for (const id of ['d1', 'd2']) {
      await publish(id, 'order.created')
      await publish(id, 'order.updated')
    }
    await disableSubscription(t.db, source.id)
    const copy = await stored.sink()
    const { id } = await createSubscription(t.db, { url: copy.url, startAt: 'earliest' })
    await disableSubscription(t.db, id)
    await publish('d1', 'order.paid')
    const done = deferred()
    const relay = stored.relay()
    relay.on('subscription:backfill', (event) => event.state === 'done' && done.resolve())
    await relay.start()
    await done.promise
    expect(await backfillState(id)).toMatchObject({ state: 'done', events: 4 })
    // Disabled: nothing is delivered, however many passes the relay makes (it reads the subscriptions at once).
    await relay.runOnce()
    expect(copy.requests).toHaveLength(0)
    await enableSubscription(t.db, id)
    await waitFor(() => copy.requests.length === 5, 'every event once enabled')
    expect(sorted(received(copy.requests)).map(([key, ids]) => [key, ids.length])).toEqual([
      ['d1', 3],
      ['d2', 2],
    ])
    for (const key of ['d1', 'd2']) {
      const sequences = copy.requests.filter((r) => r.json.aggregate_id === key).map((r) => r.json.sequence)
      expect(sequences).toEqual([...sequences].sort((a, b) => a - b))
    }
  })

  it('a filter change during the copy applies to the aggregates copied after it (each batch reads the subscription under its lock)', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    for (const id of ['f0', 'f1', 'f2', 'f3']) {
      await publish(id, 'order.created')
      await publish(id, 'invoice.paid')
    }
    const { id } = await createSubscription(t.db, {
      url: 'https://copy.example/hooks',
      eventTypes: ['order.*'],
      startAt: 'earliest',
    })
    const batch = () =>
      runBackfillBatch(
        { db: t.db, schema: 'public' },
        { subscriptionId: id, aggregates: 2, rows: 100, lockTimeoutMs: 500 },
      )
    expect((await batch()).outcome).toBe('copied')
    await updateSubscription(t.db, id, { eventTypes: null })
    expect((await batch()).outcome).toBe('copied') // f2, f3
    expect((await batch()).outcome).toBe('done') // nothing after f3
    const { rows } = await sql<{ aggregate_id: string; types: string[] }>`
      SELECT aggregate_id, array_agg(event_type ORDER BY sequence) AS types FROM outbox
      WHERE subscription_id = ${id}::uuid GROUP BY aggregate_id ORDER BY aggregate_id`.execute(t.db)
    expect(rows.map((row) => [row.aggregate_id, row.types])).toEqual([
      ['f0', ['order.created']],
      ['f1', ['order.created']],
      ['f2', ['order.created', 'invoice.paid']],
      ['f3', ['order.created', 'invoice.paid']],
    ])
  })

  it('copies an event retained only by a subscription whose tenant was changed since (every holder is read)', async () => {
    // The implicit subscription is disabled: s0 is the only holder of t1's events, then moves to tenant t2.
    const holder = await createSubscription(t.db, { url: 'https://holder.example/hooks', tenant: 't1' })
    await disableSubscription(t.db, holder.id)
    const first = await publish('tenant-moved', 'order.created', 't1')
    const second = await publish('tenant-moved', 'order.updated', 't1')
    await updateSubscription(t.db, holder.id, { tenant: 't2' })
    const { id } = await createSubscription(t.db, {
      url: 'https://copy.example/hooks',
      tenant: 't1',
      startAt: 'earliest',
    })
    const outcome = await runBackfillBatch(
      { db: t.db, schema: 'public' },
      { subscriptionId: id, aggregates: 10, rows: 100, lockTimeoutMs: 500 },
    )
    expect(outcome.outcome).toBe('done')
    const { rows } = await sql<{ event_id: string }>`
      SELECT event_id FROM outbox WHERE subscription_id = ${id}::uuid ORDER BY sequence`.execute(t.db)
    expect(rows.map((row) => row.event_id)).toEqual([first.eventId, second.eventId])
  })

  it('deleting the subscription during the copy stops it and leaves nothing behind', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    await manyAggregates('x', 1200)
    const { id } = await createSubscription(t.db, { url: 'https://copy.example/hooks', startAt: 'earliest' })
    const first = deferred()
    const relay = stored.relay()
    relay.on('subscription:backfill', () => first.resolve())
    await relay.start()
    await first.promise
    await deleteSubscription(t.db, id)
    await waitFor(() => !relayTestHooks(relay).activity().backfilling, 'the copy to stop')
    expect(await subscriptionRows(id)).toBe(0)
    expect(await getSubscription(t.db, id)).toBeUndefined()
  })

  it('two relays copy at once: every batch is copied once, and each event is delivered once, in order', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    await manyAggregates('y', 1200)
    await manyAggregates('y', 300) // a second event for the first 300
    const copy = await stored.sink()
    const { id } = await createSubscription(t.db, { url: copy.url, startAt: 'earliest' })
    const batches: RelayEventMap['subscription:backfill'][] = []
    const relays = [stored.relay({ concurrency: 16 }), stored.relay({ concurrency: 16, db: t.connect() })]
    for (const relay of relays) {
      relay.on('subscription:backfill', (event) => batches.push(event))
      await relay.start()
    }
    await waitFor(() => copy.requests.length === 1500, 'every event', 30_000)
    const done = batches.map((batch) => batch.aggregatesDone)
    expect(new Set(done).size).toBe(done.length)
    expect(batches.every((batch) => batch.copied > 0)).toBe(true)
    expect(batches.reduce((sum, batch) => sum + batch.copied, 0)).toBe(1500)
    expect(new Set(copy.requests.map((request) => request.json.event_id)).size).toBe(1500)
    for (const [, ids] of received(copy.requests)) expect(ids.length).toBeLessThanOrEqual(2)
    const firsts = copy.requests.filter((r) => r.json.sequence === 1).map((r) => r.json.aggregate_id)
    for (const request of copy.requests.filter((r) => r.json.sequence === 2)) {
      expect(firsts.indexOf(request.json.aggregate_id)).toBeGreaterThanOrEqual(0)
    }
    expect(await backfillState(id)).toMatchObject({ state: 'done', aggregatesDone: 1200, events: 1500 })
  })

  it('a batch cut off mid-way (its connection killed) or a relay stopped during one loses nothing: the next resumes from the cursor', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    for (const key of ['k1', 'k2', 'k3']) await publish(key)
    const copy = await stored.sink()
    const { id } = await createSubscription(t.db, { url: copy.url, startAt: 'earliest' })
    // Hold k2 so each batch waits on it (up to its lock timeout).
    const release = deferred()
    const entered = deferred()
    const held = t
      .connect({ max: 1 })
      .transaction()
      .execute(async (trx) => {
        await enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'k2',
          eventType: 'order.updated',
          payload: {},
        })
        entered.resolve()
        await release.promise
      })
    onTestFinished(async () => {
      release.resolve()
      await held
    })
    await entered.promise
    const errors: RelayEventMap['relay:error'][] = []
    // On a pool of its own: the connection killed below goes back to the relay's pool before its socket closes, and
    // on the test's pool the next query of the test could be handed that dead connection.
    const killed = stored.relay({ db: t.connect() })
    killed.on('relay:error', (event) => errors.push(event))
    await killed.start()
    await waitForLockWaiters(t.db)
    await sql`
      SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%outbox_backfill_batch%'`.execute(
      t.db,
    )
    await waitFor(() => errors.some((error) => error.during === 'backfill'), 'the cut batch reported')
    expect(await backfillState(id)).toMatchObject({ state: 'running', events: 0, aggregatesDone: 0 })
    // A stop while a batch waits: the stop ends once the batch gave up, and it wrote nothing.
    await waitForLockWaiters(t.db)
    await killed.stop({ timeoutMs: 5000 })
    expect(relayTestHooks(killed).activity().backfilling).toBe(false)
    expect(await subscriptionRows(id)).toBe(0)
    release.resolve()
    await held
    const next = stored.relay()
    await next.start()
    await waitFor(() => copy.requests.length === 4, 'every event from the next relay')
    expect(await backfillState(id)).toMatchObject({ state: 'done', events: 3, aggregatesDone: 3 })
  })

  it('checkIntegrity reports a running backfill as a warning, never its held-back rows as violations or overdue', async () => {
    const source = await createSubscription(t.db, { url: 'https://source.example/hooks' })
    await disableSubscription(t.db, source.id)
    await publish('i1')
    const { id } = await createSubscription(t.db, {
      url: 'https://copy.example/hooks',
      name: 'late',
      startAt: 'earliest',
    })
    await publish('i1')
    await runBackfillBatch(
      { db: t.db, schema: 'public' },
      { subscriptionId: id, aggregates: 0, rows: 100, lockTimeoutMs: 500 },
    )
    await sql`UPDATE outbox SET available_at = now() - interval '1 hour' WHERE subscription_id = ${id}::uuid`.execute(
      t.db,
    )
    const report = await checkIntegrity(t.db)
    expect(report.ok).toBe(true)
    expect(report.findings).toEqual([])
    expect(
      report.warnings.some((warning) =>
        warning.startsWith('subscription late is backfilling (0 of 1 aggregates, 0 events copied)'),
      ),
    ).toBe(true)
  })
})
