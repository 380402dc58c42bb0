import { createServer, type Socket } from 'node:net'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { createSubscription, deleteSubscription, enqueue, Relay, silentLogger } from '../src/index.js'
import { countingClaims, deferred, expectLanesLive, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

async function enqueueOne(id: string): Promise<number> {
  await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId: id, eventType: 'order.created', payload: { id } }),
    )
  return performance.now()
}

async function killListenConnections(): Promise<number> {
  const { rows } = await sql<{ killed: boolean }>`
    SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity
    WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`.execute(t.db)
  return rows.length
}

describe('LISTEN/NOTIFY wake-ups', () => {
  it('an idle relay polling every 10 s delivers an enqueued event in well under a second, and again after its LISTEN connection is killed', async () => {
    const sink = await startSink()
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      pollIntervalMs: 10_000,
      listen: { connectionString: t.url },
      logger: silentLogger,
    })
    try {
      await relay.start()
      expect(relay.listening).toBe(true)
      // Let the first poll pass so the relay is idle in its 10 s wait.
      await new Promise((resolve) => setTimeout(resolve, 300))
      const committed = await enqueueOne('l-1')
      await waitFor(() => sink.requests.length === 1, 'the first wake-up', 2000)
      expect(sink.requests[0]!.at - committed).toBeLessThan(500)

      expect(await killListenConnections()).toBe(1)
      await waitFor(() => !relay.listening, 'the relay to notice', 2000)
      await waitFor(() => relay.listening, 'the LISTEN connection to come back', 5000)
      await new Promise((resolve) => setTimeout(resolve, 300))
      const again = await enqueueOne('l-2')
      await waitFor(() => sink.requests.length === 2, 'a wake-up after the reconnect', 2000)
      expect(sink.requests[1]!.at - again).toBeLessThan(500)
    } finally {
      await relay.stop()
      await sink.close()
    }
  })

  it('an event enqueued while its lane is in flight goes out as soon as the lane is released, not at the next poll', async () => {
    // The NOTIFY of the second event finds its lane leased; what brings it out is the release reporting work left.
    for (const listen of [false, { connectionString: t.url }] as const) {
      const id = listen ? 'busy-listen' : 'busy-poll'
      const first = deferred()
      const sink = await startSink(async (request) => {
        if (request.json?.sequence === 1) await first.promise
        return { status: 200, body: { status: 'applied' } }
      })
      const relay = new Relay({
        db: t.db,
        endpoint: sink.url,
        pollIntervalMs: 10_000,
        listen,
        logger: silentLogger,
      })
      try {
        await enqueueOne(id)
        await relay.start()
        await waitFor(() => sink.requests.length === 1, 'the first event to be in flight', 2000)
        await enqueueOne(id)
        first.resolve()
        const answered = performance.now()
        await waitFor(() => sink.requests.length === 2, 'the second event', 2000)
        expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2])
        expect(sink.requests[1]!.at - answered).toBeLessThan(500)
      } finally {
        await relay.stop()
        await sink.close()
      }
    }
  })

  it('a relay serving one endpoint claims once per event at a steady trickle, not again after each delivery', async () => {
    // A delivered lane with nothing left changes nothing a NOTIFY would not announce: waking for it would cost an
    // empty claim per event (about two claims per event before this rule, on every single-endpoint relay).
    const { db, claims } = countingClaims(t.url)
    const sink = await startSink()
    const relay = new Relay({
      db,
      endpoint: sink.url,
      pollIntervalMs: 10_000,
      listen: { connectionString: t.url },
      logger: silentLogger,
    })
    const events = 20
    try {
      await relay.start()
      await waitFor(() => relay.listening, 'the LISTEN connection', 2000)
      const before = claims()
      for (let n = 0; n < events; n++) {
        await enqueueOne(`trickle-${n}`)
        await waitFor(() => sink.requests.length === n + 1, `event ${n}`, 2000)
        // Let the lane's release land before the next event, as at a steady rate.
        await new Promise((resolve) => setTimeout(resolve, 15))
      }
      const perEvent = (claims() - before) / events
      expect(perEvent).toBeGreaterThanOrEqual(1)
      expect(perEvent).toBeLessThanOrEqual(1.25)
    } finally {
      await relay.stop()
      await sink.close()
      await db.destroy()
    }
  })

  it("the release of a maxInFlight subscription's lane wakes the claim for its next lane at once", async () => {
    // The claim gave one lane where the relay offered many: the subscription's limit, counted across relays from
    // live leases, was what held it back, so the lane's release landing must bring the next claim, not the 10 s poll.
    const sink = await startSink(async () => {
      await new Promise((resolve) => setTimeout(resolve, 20))
      return { status: 200, body: { status: 'applied' } }
    })
    const { id } = await createSubscription(t.db, { url: sink.url, maxInFlight: 1 })
    const relay = new Relay({
      db: t.db,
      subscriptions: [id],
      allowPrivateNetworks: true,
      pollIntervalMs: 10_000,
      logger: silentLogger,
    })
    try {
      for (let n = 0; n < 4; n++) await enqueueOne(`limited-${n}`)
      await relay.start()
      await waitFor(() => sink.requests.length === 4, 'four lanes, one after the other', 3000)
    } finally {
      await relay.stop()
      await sink.close()
      await deleteSubscription(t.db, id)
    }
  })

  it('while the LISTEN connection cannot come back, delivery continues by polling; wake-ups return with it', async () => {
    const sink = await startSink()
    let allowConnect = true
    const errors: unknown[] = []
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      pollIntervalMs: 400,
      listen: async () => {
        if (!allowConnect) throw new Error('database refuses LISTEN connections for now')
        const client = new pg.Client({ connectionString: t.url })
        await client.connect()
        return client
      },
      logger: silentLogger,
    })
    relay.on('relay:error', (event) => {
      if (event.during === 'listen') errors.push(event.error)
    })
    try {
      await relay.start()
      allowConnect = false
      await killListenConnections()
      await waitFor(() => errors.length >= 2, 'failed reconnects', 5000)
      expect(relay.listening).toBe(false)
      await enqueueOne('p-1')
      await waitFor(
        () => sink.requests.some((request) => request.json.aggregate_id === 'p-1'),
        'delivery by polling',
        3000,
      )

      allowConnect = true
      await waitFor(() => relay.listening, 'wake-ups to return', 40_000)
      await new Promise((resolve) => setTimeout(resolve, 500))
      const committed = await enqueueOne('p-2')
      await waitFor(
        () => sink.requests.some((request) => request.json.aggregate_id === 'p-2'),
        'a wake-up',
        2000,
      )
      const request = sink.requests.find((one) => one.json.aggregate_id === 'p-2')!
      expect(request.at - committed).toBeLessThan(350)
    } finally {
      await relay.stop()
      await sink.close()
    }
  }, 60_000)

  it('enqueue with NOTIFY from 8 connections at once keeps working under load, in order', async () => {
    const sink = await startSink()
    const relay = new Relay({
      db: t.connect({ max: 4 }),
      endpoint: sink.url,
      listen: { connectionString: t.url },
      logger: silentLogger,
    })
    const writers = t.connect({ max: 8 })
    try {
      await relay.start()
      await Promise.all(
        Array.from({ length: 8 }, async (_, writer) => {
          for (let n = 0; n < 40; n++) {
            await writers.transaction().execute(async (trx) => {
              await enqueue(trx, {
                aggregateType: 'order',
                aggregateId: `n-${n % 10}`,
                eventType: 'order.updated',
                payload: { writer, n },
              })
              await enqueue(trx, {
                aggregateType: 'customer',
                aggregateId: `c-${writer}`,
                eventType: 'customer.updated',
                payload: { n },
              })
            })
          }
        }),
      )
      await waitFor(() => sink.requests.length >= 640, 'all 640 events', 30_000)
    } finally {
      await relay.stop()
      await sink.close()
    }
    const seen = new Map<string, number>()
    for (const request of sink.requests) {
      const key = `${request.json.aggregate_type}:${request.json.aggregate_id}`
      expect(request.json.sequence).toBe((seen.get(key) ?? 0) + 1)
      seen.set(key, request.json.sequence)
    }
    expect(sink.requests).toHaveLength(640)
  })

  it('a LISTEN host that accepts connections and never answers cannot hang start(): it gives up after connectTimeoutMs and polls', async () => {
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const { port } = silent.address() as { port: number }
    const sink = await startSink()
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      pollIntervalMs: 20,
      listen: { connectionString: `postgres://nobody@127.0.0.1:${port}/nothing`, connectTimeoutMs: 300 },
      logger: silentLogger,
    })
    try {
      const started = performance.now()
      const outcome = await Promise.race([
        relay.start().then(() => 'started'),
        new Promise((resolve) => setTimeout(() => resolve('hung'), 5000)),
      ])
      expect(outcome).toBe('started')
      expect(performance.now() - started).toBeLessThan(3000)
      expect(relay.listening).toBe(false)
      await enqueueOne('polled')
      await waitFor(() => sink.requests.length === 1, 'delivery by polling')
    } finally {
      await relay.stop()
      await sink.close()
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => silent.close(resolve))
    }
  })
})
