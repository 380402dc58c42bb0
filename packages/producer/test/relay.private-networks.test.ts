import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { IMPLICIT_SUBSCRIPTION_ID } from '../src/delivery-target.js'
import { enqueue } from '../src/enqueue.js'
import { Relay, silentLogger } from '../src/index.js'
import { expectLanesLive } from './support.js'

const t = useTestDatabase()

/** A loopback webhook receiver that counts every TCP connection as well as every request: a refusal opens none. */
interface Receiver {
  readonly port: number
  readonly paths: string[]
  connections: number
  close(): Promise<void>
}

let receiver: Receiver

beforeEach(async () => {
  // Each test starts from no stored subscription, and the implicit one disabled: it would otherwise get a row of
  // every event, that only an `endpoint` relay serves.
  await sql`DELETE FROM outbox`.execute(t.db)
  await sql`DELETE FROM outbox_lane`.execute(t.db)
  await sql`DELETE FROM outbox_counter`.execute(t.db)
  await sql`DELETE FROM outbox_subscription WHERE id <> ${IMPLICIT_SUBSCRIPTION_ID}`.execute(t.db)
  await sql`UPDATE outbox_subscription SET state = 'disabled' WHERE id = ${IMPLICIT_SUBSCRIPTION_ID}`.execute(
    t.db,
  )
  receiver = await startReceiver()
})

afterEach(async () => {
  await receiver.close()
  await expectLanesLive(t.db)
})

async function startReceiver(): Promise<Receiver> {
  const server: Server = createServer((req, res) => {
    state.paths.push(req.url ?? '')
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"status":"applied"}')
    })
  })
  server.on('connection', () => {
    state.connections++
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const state: Receiver = {
    port: (server.address() as AddressInfo).port,
    paths: [],
    connections: 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
  return state
}

/** Stores a subscription with one retry 10 ms after the first failure; returns its id. */
async function subscribe(name: string, url: string): Promise<string> {
  const { rows } = await sql<{ id: string }>`
    INSERT INTO outbox_subscription (name, url, retry_schedule) VALUES (${name}, ${url}, '{10}') RETURNING id`.execute(
    t.db,
  )
  return rows[0]!.id
}

async function enqueueOne(aggregateId: string): Promise<void> {
  await t.db.transaction().execute((trx) =>
    enqueue(trx, {
      aggregateType: 'order',
      aggregateId,
      eventType: 'order.created',
      payload: { aggregateId },
    }),
  )
}

/** The outbox rows of the given subscriptions, by subscription name. */
async function rowsByName() {
  const { rows } = await sql<{
    name: string
    status: string
    attempts: number
    last_status: number | null
    last_error: string | null
  }>`
    SELECT s.name, o.status, o.attempts, o.last_status, o.last_error
    FROM outbox o JOIN outbox_subscription s ON s.id = o.subscription_id ORDER BY s.name`.execute(t.db)
  return Object.fromEntries(rows.map(({ name, ...row }) => [name, row]))
}

/** Makes every pending row due now, so the next run retries it without waiting for its schedule. */
async function makeDue(): Promise<void> {
  await sql`UPDATE outbox SET available_at = now() WHERE status = 'pending'`.execute(t.db)
}

const HINT =
  'if this destination is meant to be internal, set the relay option allowPrivateNetworks: true (CLI --allow-private-networks)'

describe('relay private networks', () => {
  it('by default refuses stored subscriptions that reach loopback, by IP literal or by name: no connection is opened, the attempts fail, the dead letters say only "destination not allowed" and the relay log says why', async () => {
    await subscribe('literal', `http://127.0.0.1:${receiver.port}/hooks`)
    await subscribe('named', `http://localhost:${receiver.port}/hooks`)
    await enqueueOne('guarded-1')
    const logged: string[] = []
    const relay = new Relay({
      db: t.db,
      logger: { ...silentLogger, warn: (_fields, message) => logged.push(message) },
    })
    const retries: string[] = []
    relay.on('delivery:retry', (event) => retries.push(event.error))

    expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 2, dead: 0 })
    expect(retries).toHaveLength(2)
    await makeDue()
    // An ordinary failure: retried by the schedule, then dead-lettered.
    expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 2 })

    expect(receiver.paths).toEqual([])
    expect(receiver.connections).toBe(0)
    const rows = await rowsByName()
    expect(rows.literal).toEqual({
      status: 'dead',
      attempts: 2,
      last_status: null,
      // What a subscriber may one day read names no internal host or address.
      last_error: 'destination not allowed',
    })
    expect(rows.named).toEqual({
      status: 'dead',
      attempts: 2,
      last_status: null,
      last_error: 'destination not allowed',
    })
    expect(logged).toContain(
      `refused to connect to 127.0.0.1 (loopback): subscription URLs may only reach public addresses; ${HINT}`,
    )
    // localhost may resolve to ::1 before 127.0.0.1; either is loopback.
    expect(
      logged.some((line) => /^refused to connect to localhost \((127\.0\.0\.1|::1), loopback\): /.test(line)),
    ).toBe(true)
    await relay.stop()
  })

  it('with allowPrivateNetworks: true delivers the same subscriptions', async () => {
    await subscribe('literal', `http://127.0.0.1:${receiver.port}/hooks`)
    await subscribe('named', `http://localhost:${receiver.port}/hooks`)
    await enqueueOne('allowed-1')
    const relay = new Relay({ db: t.db, allowPrivateNetworks: true, logger: silentLogger })

    expect(await relay.runOnce()).toEqual({ delivered: 2, failed: 0, dead: 0 })
    expect(receiver.paths).toEqual(['/hooks', '/hooks'])
    const rows = await rowsByName()
    expect(rows.literal).toMatchObject({ status: 'sent', attempts: 1, last_status: 200 })
    expect(rows.named).toMatchObject({ status: 'sent', attempts: 1, last_status: 200 })
    await relay.stop()
  })

  it('a refused attempt is retried like any failure and succeeds once a relay allows private networks', async () => {
    await subscribe('literal', `http://127.0.0.1:${receiver.port}/hooks`)
    await enqueueOne('retried-1')
    const guarded = new Relay({ db: t.db, logger: silentLogger })
    expect(await guarded.runOnce()).toEqual({ delivered: 0, failed: 1, dead: 0 })
    await guarded.stop()
    expect(receiver.paths).toEqual([])

    await makeDue()
    const allowed = new Relay({ db: t.db, allowPrivateNetworks: true, logger: silentLogger })
    expect(await allowed.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
    await allowed.stop()
    expect(receiver.paths).toEqual(['/hooks'])
    expect((await rowsByName()).literal).toMatchObject({ status: 'sent', attempts: 2, last_status: 200 })
  })

  it("never restricts the implicit subscription: the relay's endpoint is the operator's, not a customer's", async () => {
    await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE id = ${IMPLICIT_SUBSCRIPTION_ID}`.execute(
      t.db,
    )
    await enqueueOne('implicit-1')
    for (const host of ['127.0.0.1', 'localhost']) {
      const relay = new Relay({
        db: t.db,
        endpoint: `http://${host}:${receiver.port}/${host}`,
        logger: silentLogger,
      })
      expect(relay.options.allowPrivateNetworks).toBe(false)
      if (host === 'localhost') await enqueueOne('implicit-1')
      expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
      await relay.stop()
    }
    expect(receiver.paths).toEqual(['/127.0.0.1', '/localhost'])
  })
})
