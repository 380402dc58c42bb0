import { HEADERS } from '@outbox/protocol'
import { type Sink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  getSubscription,
  rotateSubscriptionSecret,
} from '../src/index.js'
import { sequencesByAggregate, useStoredSubscriptions } from './stored-subscriptions.js'
import { deferred, waitFor, waitForLockWaiters } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 50 })
const sink = stored.sink
/** A relay serving the stored subscriptions; the sinks are on loopback, which only tests may reach. */
const storedRelay = stored.relay

async function publish(aggregateId: string, eventType = 'order.updated', tenant?: string, n = 0) {
  return await t.db.transaction().execute((trx) =>
    enqueue(trx, {
      aggregateType: 'order',
      aggregateId,
      eventType,
      payload: { n },
      ...(tenant === undefined ? {} : { tenant }),
    }),
  )
}

describe('relay with stored subscriptions', () => {
  it('fans each event out to every subscription, in order per aggregate, each signed with its own secret', async () => {
    const [one, two] = [await sink(), await sink()]
    const a = await createSubscription(t.db, { url: one.url, name: 'fan-a' })
    const b = await createSubscription(t.db, { url: two.url, name: 'fan-b' })
    for (let n = 0; n < 5; n++) {
      await Promise.all(['f1', 'f2', 'f3'].map((id) => publish(id, 'order.updated', undefined, n)))
    }
    const relay = storedRelay({ concurrency: 4 })
    await relay.start()
    await waitFor(() => one.requests.length === 15 && two.requests.length === 15, 'both subscriptions')
    for (const target of [one, two]) {
      for (const sequences of sequencesByAggregate(target).values())
        expect(sequences).toEqual([1, 2, 3, 4, 5])
    }
    // Each request verifies with its subscription's secret, and not with the other's.
    const verify = (secret: string, request: Sink['requests'][number]) =>
      new Webhook(secret).verify(request.body, {
        'webhook-id': request.headers[HEADERS.webhookId] as string,
        'webhook-timestamp': request.headers[HEADERS.webhookTimestamp] as string,
        'webhook-signature': request.headers[HEADERS.webhookSignature] as string,
      })
    expect(() => verify(a.secret, one.requests[0]!)).not.toThrow()
    expect(() => verify(b.secret, one.requests[0]!)).toThrow()
    expect(() => verify(b.secret, two.requests[0]!)).not.toThrow()
    // The same event goes to both with the same id and sequence.
    const ids = (target: Sink) => target.requests.map((request) => request.json.event_id).sort()
    expect(ids(one)).toEqual(ids(two))
  })

  it("routes by tenant: a tenant's subscription never receives another tenant's events", async () => {
    const [forA, forB, internal] = [await sink(), await sink(), await sink()]
    await createSubscription(t.db, { url: forA.url, tenant: 'tenant-a' })
    await createSubscription(t.db, { url: forB.url, tenant: 'tenant-b' })
    await createSubscription(t.db, { url: internal.url, tenant: '*' })
    const sent: (string | undefined)[] = []
    for (let n = 0; n < 30; n++) {
      const tenant = [undefined, 'tenant-a', 'tenant-b'][n % 3]
      sent.push(tenant)
      await publish(`t${n % 4}`, 'order.updated', tenant, n)
    }
    const relay = storedRelay({ concurrency: 4 })
    await relay.start()
    await waitFor(
      () => forA.requests.length === 10 && forB.requests.length === 10 && internal.requests.length === 30,
      'every routed event',
    )
    const tenantOf = (request: Sink['requests'][number]) => sent[request.json.data.n as number]
    expect(forA.requests.every((request) => tenantOf(request) === 'tenant-a')).toBe(true)
    expect(forB.requests.every((request) => tenantOf(request) === 'tenant-b')).toBe(true)
    // The tenant is not on the wire: a subscriber learns it from its own subscription.
    expect(Object.keys(forA.requests[0]!.json)).not.toContain('tenant')
  })

  it('filters by exact type and trailing wildcard; the filtered subscription sees sequence gaps', async () => {
    const [orders, paid] = [await sink(), await sink()]
    await createSubscription(t.db, { url: orders.url, eventTypes: ['order.*'] })
    await createSubscription(t.db, { url: paid.url, eventTypes: ['invoice.paid'] })
    await publish('g1', 'order.created')
    await publish('g1', 'invoice.paid')
    await publish('g1', 'order.shipped')
    await publish('g1', 'invoice.paidout')
    const relay = storedRelay()
    await relay.start()
    await waitFor(() => orders.requests.length === 2 && paid.requests.length === 1, 'filtered events')
    expect(orders.requests.map((request) => [request.json.type, request.json.sequence])).toEqual([
      ['order.created', 1],
      ['order.shipped', 3],
    ])
    expect(paid.requests.map((request) => [request.json.type, request.json.sequence])).toEqual([
      ['invoice.paid', 2],
    ])
  })

  it('a subscription that fails or hangs never holds back a healthy one', async () => {
    const hung = deferred()
    const healthy = await sink()
    const failing = await sink(() => ({ status: 500, body: 'down' }))
    const hanging = await sink(async () => {
      await hung.promise
      return { status: 200 }
    })
    await createSubscription(t.db, { url: healthy.url, name: 'iso-healthy' })
    await createSubscription(t.db, { url: failing.url, name: 'iso-failing', retrySchedule: [20, 20, 20, 20] })
    await createSubscription(t.db, { url: hanging.url, name: 'iso-hanging', requestTimeoutMs: 20_000 })
    for (let n = 0; n < 4; n++) {
      await Promise.all(
        Array.from({ length: 8 }, (_, lane) => publish(`iso${lane}`, 'order.updated', undefined, n)),
      )
    }
    const relay = storedRelay({ concurrency: 4, leaseMs: 30_000 })
    await relay.start()
    // Every event reaches the healthy subscriber while the hanging one holds requests open and the failing one
    // burns through its retries.
    await waitFor(() => healthy.requests.length === 32, 'the healthy subscription')
    expect(hanging.requests.length).toBeGreaterThan(0)
    expect(hanging.requests.length).toBeLessThan(32)
    await waitFor(() => failing.requests.length >= 8, 'the failing subscription tried')
    hung.resolve()
    await waitFor(() => hanging.requests.length === 32, 'the hanging subscription once it answers', 30_000)
    for (const sequences of sequencesByAggregate(hanging).values()) expect(sequences).toEqual([1, 2, 3, 4])
  })

  it('signs with both secrets during a rotation overlap, and with the new one alone after it', async () => {
    const target = await sink()
    const { id, secret: old } = await createSubscription(t.db, { url: target.url })
    const { secret: fresh } = await rotateSubscriptionSecret(t.db, id, { overlapMs: 3_600_000 })
    const headersOf = (request: Sink['requests'][number]) => ({
      'webhook-id': request.headers[HEADERS.webhookId] as string,
      'webhook-timestamp': request.headers[HEADERS.webhookTimestamp] as string,
      'webhook-signature': request.headers[HEADERS.webhookSignature] as string,
    })
    await publish('rot1')
    expect(await storedRelay().runOnce()).toMatchObject({ delivered: 1 })
    const first = target.requests[0]!
    expect(headersOf(first)['webhook-signature'].split(' ')).toHaveLength(2)
    expect(() => new Webhook(old).verify(first.body, headersOf(first))).not.toThrow()
    expect(() => new Webhook(fresh).verify(first.body, headersOf(first))).not.toThrow()
    // A leaked secret: rotate with no overlap, and every earlier secret ends at once.
    const { secret: newest } = await rotateSubscriptionSecret(t.db, id, { overlapMs: 0 })
    await publish('rot1')
    // A relay started now reads the subscription afresh (a running one picks the change up within two seconds).
    expect(await storedRelay().runOnce()).toMatchObject({ delivered: 1 })
    const second = target.requests[1]!
    expect(headersOf(second)['webhook-signature'].split(' ')).toHaveLength(1)
    expect(() => new Webhook(newest).verify(second.body, headersOf(second))).not.toThrow()
    expect(() => new Webhook(fresh).verify(second.body, headersOf(second))).toThrow()
    expect(() => new Webhook(old).verify(second.body, headersOf(second))).toThrow()
  })

  it('a disabled subscription keeps its events and delivers them in order once enabled', async () => {
    const target = await sink()
    const { id } = await createSubscription(t.db, { url: target.url })
    await disableSubscription(t.db, id, { reason: 'maintenance' })
    for (let n = 0; n < 3; n++) await publish('dis1', 'order.updated', undefined, n)
    const relay = storedRelay()
    expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
    expect(target.requests).toHaveLength(0)
    await enableSubscription(t.db, id)
    expect(await relay.runOnce()).toEqual({ delivered: 3, failed: 0, dead: 0 })
    expect(target.requests.map((request) => request.json.sequence)).toEqual([1, 2, 3])
  })

  it("skips and reports a subscription whose timeout does not fit the relay's lease, serving the others", async () => {
    const [fits, tooSlow] = [await sink(), await sink()]
    await createSubscription(t.db, { url: fits.url, name: 'lease-fits' })
    const { id } = await createSubscription(t.db, {
      url: tooSlow.url,
      name: 'lease-long',
      requestTimeoutMs: 9000,
    })
    await publish('lease1')
    const relay = storedRelay({ leaseMs: 5000, requestTimeoutMs: 2000 })
    const skipped: { subscriptionId: string; reason: string }[] = []
    relay.on('subscription:skipped', (event) => skipped.push(event))
    expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
    expect(fits.requests).toHaveLength(1)
    expect(tooSlow.requests).toHaveLength(0)
    expect(skipped).toEqual([
      expect.objectContaining({
        subscriptionId: id,
        reason: expect.stringMatching(/does not fit this relay's leaseMs/),
      }),
    ])
  })

  it('410 Gone disables that subscription (reason gone, reported once), keeps its events, and spares the others', async () => {
    let gone = true
    const [leaving, staying] = [
      await sink(() => (gone ? { status: 410, body: 'gone' } : { status: 200 })),
      await sink(),
    ]
    const { id } = await createSubscription(t.db, { url: leaving.url, name: 'gone-leaving' })
    await createSubscription(t.db, { url: staying.url, name: 'gone-staying' })
    await Promise.all(['g1', 'g2', 'g3'].map((lane) => publish(lane)))
    const relay = storedRelay({ concurrency: 8, retrySchedule: [10, 10, 10] })
    const disabled: unknown[] = []
    relay.on('subscription:disabled', (event) => disabled.push(event))
    // One claim takes all six lanes: the three that answer 410 disable their subscription once.
    await relay.runOnce()
    expect(disabled).toEqual([{ subscriptionId: id, name: 'gone-leaving', reason: 'gone', httpStatus: 410 }])
    expect(await getSubscription(t.db, id)).toMatchObject({ state: 'disabled', disabledReason: 'gone' })
    // Once disabled, no relay sends it anything more; the other subscription gets everything.
    const sentBefore = leaving.requests.length
    await storedRelay().runOnce()
    expect(leaving.requests.length).toBe(sentBefore)
    expect(staying.requests).toHaveLength(3)
    // The customer is back: enabled again, every kept event is delivered in order.
    gone = false
    await enableSubscription(t.db, id)
    await waitFor(async () => {
      await relay.runOnce()
      return (
        new Set(leaving.requests.filter((request) => request.json).map((r) => r.json.event_id)).size === 3
      )
    }, 'the kept events after enabling')
  })

  it('a relay given subscription ids serves only those', async () => {
    const [mine, theirs] = [await sink(), await sink()]
    const { id } = await createSubscription(t.db, { url: mine.url })
    await createSubscription(t.db, { url: theirs.url })
    await publish('only1')
    const relay = storedRelay({ subscriptions: [id] })
    expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
    expect(mine.requests).toHaveLength(1)
    expect(theirs.requests).toHaveLength(0)
  })

  it('maxInFlight bounds one endpoint across relays, counted from live leases', async () => {
    let open = 0
    let most = 0
    const target = await sink(async () => {
      open++
      most = Math.max(most, open)
      await new Promise((resolve) => setTimeout(resolve, 30))
      open--
      return { status: 200 }
    })
    await createSubscription(t.db, { url: target.url, maxInFlight: 2 })
    await Promise.all(Array.from({ length: 16 }, (_, lane) => publish(`mif${lane}`)))
    for (let relay = 0; relay < 3; relay++) await storedRelay({ concurrency: 8 }).start()
    await waitFor(() => target.requests.length === 16, 'every event')
    expect(most).toBeLessThanOrEqual(2)
    expect(most).toBe(2)
  })

  it('an event committed after createSubscription returns is never missed, whatever enqueues were open', async () => {
    const target = await sink()
    const open = deferred()
    // A transaction that has enqueued and is still open when the subscription is created.
    const early = t.db.transaction().execute(async (trx) => {
      const event = await enqueue(trx, {
        aggregateType: 'order',
        aggregateId: 'bar1',
        eventType: 'x',
        payload: {},
      })
      await open.promise
      return event
    })
    await waitFor(async () => {
      const { rows } = await sql<{ n: string }>`
        SELECT count(*) AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
        WHERE c.relname = 'outbox_counter' AND l.mode = 'RowExclusiveLock' AND l.granted`.execute(t.db)
      return Number(rows[0]!.n) > 0
    }, 'the open enqueue')
    const creating = createSubscription(t.db, { url: target.url, name: 'barrier' })
    await waitForLockWaiters(t.db, 1)
    // An enqueue that starts while the subscription is being created waits for it, and then routes to it.
    const late = t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId: 'bar1', eventType: 'x', payload: {} }),
      )
    await waitForLockWaiters(t.db, 2)
    open.resolve()
    const [{ id }, earlyEvent, lateEvent] = await Promise.all([creating, early, late])
    const routed = async (eventId: string) =>
      (
        await sql<{ subscription_id: string }>`
          SELECT subscription_id FROM outbox WHERE event_id = ${eventId}::uuid`.execute(t.db)
      ).rows.map((row) => row.subscription_id)
    expect(earlyEvent.sequence).toBe(1)
    expect(lateEvent.sequence).toBe(2)
    expect(await routed(earlyEvent.eventId)).toEqual([])
    expect(await routed(lateEvent.eventId)).toEqual([id])
    const relay = storedRelay()
    expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
    expect(target.requests.map((request) => request.json.sequence)).toEqual([2])
  })
})
