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

/**
 * A poll interval no test here waits out, so a delivery seen is a wake-up's: the verdict is which path delivered,
 * not how fast, and a loaded machine cannot change it.
 */
const POLL_NEVER_MS = 600_000
/** How long a wake-up may take on a loaded machine: generous, and far below {@link POLL_NEVER_MS}. */
const WAKE_CEILING_MS = 60_000

describe('LISTEN/NOTIFY wake-ups', () => {
  it('an idle relay polling every 10 min delivers an enqueued event long before its next poll, and again after its LISTEN connection is killed', async () => {
    const sink = await startSink()
    // The poll is far beyond every wait below: a delivery within them was woken by the NOTIFY, on any machine.
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      pollIntervalMs: POLL_NEVER_MS,
      listen: { connectionString: t.url },
      logger: silentLogger,
    })
    try {
      await relay.start()
      expect(relay.listening).toBe(true)
      // Let the first poll pass so the relay is idle in its 10 s wait.
      await new Promise((resolve) => setTimeout(resolve, 300))
      await enqueueOne('l-1')
      await waitFor(() => sink.requests.length === 1, 'the first wake-up', WAKE_CEILING_MS)

      expect(await killListenConnections()).toBe(1)
      await waitFor(() => !relay.listening, 'the relay to notice', WAKE_CEILING_MS)
      await waitFor(() => relay.listening, 'the LISTEN connection to come back', WAKE_CEILING_MS)
      await new Promise((resolve) => setTimeout(resolve, 300))
      await enqueueOne('l-2')
      await waitFor(() => sink.requests.length === 2, 'a wake-up after the reconnect', WAKE_CEILING_MS)
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
        pollIntervalMs: POLL_NEVER_MS,
        listen,
        logger: silentLogger,
      })
      try {
        await enqueueOne(id)
        await relay.start()
        await waitFor(() => sink.requests.length === 1, 'the first event to be in flight', WAKE_CEILING_MS)
        await enqueueOne(id)
        first.resolve()
        await waitFor(() => sink.requests.length === 2, 'the second event', WAKE_CEILING_MS)
        expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2])
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
      pollIntervalMs: POLL_NEVER_MS,
      listen: { connectionString: t.url },
      logger: silentLogger,
    })
    const events = 20
    try {
      await relay.start()
      await waitFor(() => relay.listening, 'the LISTEN connection', WAKE_CEILING_MS)
      const before = claims()
      for (let n = 0; n < events; n++) {
        await enqueueOne(`trickle-${n}`)
        await waitFor(() => sink.requests.length === n + 1, `event ${n}`, WAKE_CEILING_MS)
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
    // live leases, was what held it back, so the lane's release landing must bring the next claim, not the poll.
    const sink = await startSink(async () => {
      await new Promise((resolve) => setTimeout(resolve, 20))
      return { status: 200, body: { status: 'applied' } }
    })
    const { id } = await createSubscription(t.db, { url: sink.url, maxInFlight: 1 })
    const relay = new Relay({
      db: t.db,
      subscriptions: [id],
      allowPrivateNetworks: true,
      pollIntervalMs: POLL_NEVER_MS,
      logger: silentLogger,
    })
    try {
      for (let n = 0; n < 4; n++) await enqueueOne(`limited-${n}`)
      await relay.start()
      await waitFor(() => sink.requests.length === 4, 'four lanes, one after the other', WAKE_CEILING_MS)
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
      // Long enough that a wake-up's delivery (milliseconds) stands apart from a poll's on a loaded machine, short
      // enough that the polling fallback delivers within the test.
      pollIntervalMs: 3000,
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
      await waitFor(() => errors.length >= 2, 'failed reconnects', WAKE_CEILING_MS)
      expect(relay.listening).toBe(false)
      await enqueueOne('p-1')
      await waitFor(
        () => sink.requests.some((request) => request.json.aggregate_id === 'p-1'),
        'delivery by polling',
        WAKE_CEILING_MS,
      )

      allowConnect = true
      await waitFor(() => relay.listening, 'wake-ups to return', 40_000)
      await new Promise((resolve) => setTimeout(resolve, 500))
      const committed = await enqueueOne('p-2')
      await waitFor(
        () => sink.requests.some((request) => request.json.aggregate_id === 'p-2'),
        'a wake-up',
        WAKE_CEILING_MS,
      )
      const request = sink.requests.find((one) => one.json.aggregate_id === 'p-2')!
      // Two thirds of the poll interval: a margin of 100 times what a wake-up takes on an idle machine.
      expect(request.at - committed).toBeLessThan(2000)
    } finally {
      await relay.stop()
      await sink.close()
    }
  }, 120_000)

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
      const outcome = await Promise.race([
        relay.start().then(() => 'started'),
        // A hang is for ever: a ceiling far beyond connectTimeoutMs tells it apart on any machine.
        new Promise((resolve) => setTimeout(() => resolve('hung'), WAKE_CEILING_MS)),
      ])
      expect(outcome).toBe('started')
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
