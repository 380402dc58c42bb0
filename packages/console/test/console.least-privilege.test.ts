import { randomBytes } from 'node:crypto'
import {
  createSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  listDeadLetters,
  producerGrantsSql,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import request from 'supertest'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsole, type OutboxConsole } from '../src/index.js'

const t = useTestDatabase()
const TOKEN = 'console-role-test-token-0123456789'
const bearer = { Authorization: `Bearer ${TOKEN}` }
// Roles are cluster-wide and test files share a server: this run's own names, dropped afterwards.
const suffix = randomBytes(4).toString('hex')
const ROLES = {
  app: `outbox_app_${suffix}`,
  relay: `outbox_relay_${suffix}`,
  console: `outbox_console_${suffix}`,
}

let consoleDb: Kysely<any>
let mounted: OutboxConsole
let app: express.Express
let deadEventId: string

beforeAll(async () => {
  for (const role of Object.values(ROLES)) await sql.raw(`CREATE ROLE ${role} NOLOGIN`).execute(t.db)
  await sql.raw(producerGrantsSql({ roles: ROLES })).execute(t.db)
  const pool = new pg.Pool({ connectionString: t.url, max: 4 })
  pool.on('error', () => {})
  // Queued before any query of the pool's users: every statement of the console runs as its role.
  pool.on('connect', (client) => {
    client.on('error', () => {})
    void client.query(`SET ROLE ${ROLES.console}`)
  })
  consoleDb = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
  mounted = createConsole({ db: consoleDb, token: TOKEN, actions: true })
  app = express().use('/outbox', mounted)

  await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
  const sink = await startSink(() => ({ status: 500, body: 'down' }))
  try {
    await createSubscription(t.db, { url: sink.url, name: 'role-sub', retrySchedule: [] })
    await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId: 'r1', eventType: 'order.created', payload: {} }),
      )
    const relay = new Relay({ db: t.db, allowPrivateNetworks: true, listen: false, logger: silentLogger })
    await relay.runOnce()
    await relay.stop()
  } finally {
    await sink.close()
  }
  const [dead] = await listDeadLetters(t.db)
  deadEventId = dead!.eventId
})

afterAll(async () => {
  await mounted?.close()
  await consoleDb?.destroy()
  for (const role of Object.values(ROLES)) {
    await sql.raw(`DROP OWNED BY ${role}`).execute(t.db)
    await sql.raw(`DROP ROLE ${role}`).execute(t.db)
  }
})

describe("the console under its least-privilege role (producerGrantsSql's console role)", () => {
  it('serves every page and the chart data without reading a secret', async () => {
    const pages = [
      '/outbox/',
      '/outbox/lanes?state=blocked',
      '/outbox/lanes?state=struggling',
      '/outbox/lanes?state=leased',
      '/outbox/dead-letters',
      `/outbox/events/${deadEventId}`,
      '/outbox/audit',
      '/outbox/api/throughput',
      '/outbox/api/lag',
    ]
    for (const page of pages) {
      const response = await request(app).get(page).set(bearer)
      expect(response.status, `${page}: ${response.text.slice(0, 300)}`).toBe(200)
    }
    const overview = await request(app).get('/outbox/').set(bearer)
    expect(overview.text).toContain('role-sub')
  })

  it('acts: redrives a dead letter and records it in the audit log', async () => {
    const response = await request(app)
      .post('/outbox/dead-letters/redrive')
      .set(bearer)
      .type('form')
      .send({ eventId: deadEventId })
    expect(response.status, response.text.slice(0, 300)).toBe(303)
    expect(await listDeadLetters(t.db)).toEqual([])
    const audit = await request(app).get('/outbox/audit').set(bearer)
    expect(audit.text).toContain('dead-letters.redrive')
  })

  it('is refused the secrets themselves', async () => {
    await expect(sql`SELECT secret FROM outbox_subscription_secret`.execute(consoleDb)).rejects.toMatchObject(
      {
        code: '42501',
      },
    )
  })
})
