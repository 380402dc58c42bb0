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
})
