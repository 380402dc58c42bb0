import { openKysely, type RunningPostgres, startPostgres, startSink } from '@outbox/test-harness'
import type { Kysely } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { enqueue, migrate, Relay, silentLogger, stats } from '../src/index.js'
import { waitFor } from './support.js'

// This suite stops and starts PostgreSQL, so it always runs its own embedded server, whatever DATABASE_URL says.
let server: RunningPostgres
let db: Kysely<any>

beforeAll(async () => {
  server = await startPostgres()
  db = openKysely(server.url())
  await migrate(db)
}, 120_000)

afterAll(async () => {
  await db?.destroy()
  await server?.stop()
})

async function enqueueBatch(prefix: string, count: number): Promise<void> {
  for (let n = 0; n < count; n++) {
    await db.transaction().execute((trx) =>
      enqueue(trx, {
        aggregateType: 'order',
        aggregateId: `${prefix}-${n % 5}`,
        eventType: 'order.updated',
        payload: { n },
      }),
    )
  }
}

describe('database outage', () => {
  it('PostgreSQL stopped and restarted under a running relay: delivery resumes and every event arrives', async () => {
    const sink = await startSink(async () => {
      await new Promise((resolve) => setTimeout(resolve, 5))
      return { status: 200, body: { status: 'applied' } }
    })
    const errors: string[] = []
    const relay = new Relay({
      db,
      endpoint: sink.url,
      pollIntervalMs: 50,
      leaseMs: 5000,
      requestTimeoutMs: 1000,
      listen: { connectionString: server.url() },
      logger: silentLogger,
    })
    relay.on('relay:error', (event) => errors.push(event.during))
    try {
      await enqueueBatch('before', 200)
      await relay.start()
      await waitFor(() => sink.requests.length >= 20, 'delivery to begin')
      await server.restart({ downMs: 1500 })
      await enqueueBatch('after', 50)
      await waitFor(async () => (await stats(db)).pending === 0, 'every event after the restart', 60_000)
      expect(relay.running).toBe(true)
      await waitFor(() => relay.listening, 'LISTEN to come back', 40_000)
    } finally {
      await relay.stop()
      await sink.close()
    }
    expect(errors.length).toBeGreaterThan(0)
    const rows = await db.selectFrom('outbox').select(['event_id', 'status']).execute()
    expect(rows).toHaveLength(250)
    expect(rows.every((row) => row.status === 'sent')).toBe(true)
    const delivered = new Set(sink.requests.map((request) => request.json.event_id))
    for (const row of rows) expect(delivered.has(row.event_id)).toBe(true)
    // Order held across the outage: per aggregate, a sequence never arrives before the one below it.
    const highest = new Map<string, number>()
    for (const request of sink.requests) {
      const id = request.json.aggregate_id
      expect(request.json.sequence).toBeLessThanOrEqual((highest.get(id) ?? 0) + 1)
      highest.set(id, Math.max(highest.get(id) ?? 0, request.json.sequence))
    }
  }, 120_000)

  it('start() before PostgreSQL is up resolves, reports each failed claim, and delivers once it answers', async () => {
    const sink = await startSink()
    const errors: string[] = []
    await server.halt()
    const relay = new Relay({
      db,
      endpoint: sink.url,
      pollIntervalMs: 50,
      listen: { connectionString: server.url() },
      logger: silentLogger,
    })
    relay.on('relay:error', (event) => errors.push(event.during))
    try {
      // Resolves rather than rejects: a service started beside its database keeps running and catches up.
      await relay.start()
      expect(relay.running).toBe(true)
      await waitFor(() => errors.filter((during) => during === 'claim').length >= 2, 'claims to fail')
      expect(relay.lastPassAt).toBeUndefined()
      expect(relay.listening).toBe(false)
      await server.start()
      await enqueueBatch('late', 1)
      await waitFor(
        () => sink.requests.some((request) => request.json.aggregate_id === 'late-0'),
        'delivery',
        60_000,
      )
      expect(relay.lastPassAt).toBeInstanceOf(Date)
      await waitFor(() => relay.listening, 'LISTEN to connect', 40_000)
    } finally {
      await server.start()
      await relay.stop()
      await sink.close()
    }
    expect(errors).toContain('listen')
  }, 120_000)
})
