import { enqueue, type Logger, listAudit, listDeadLetters, Relay, silentLogger } from '@outbox/producer'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import request from 'supertest'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type ConsoleOptions, CSRF_FIELD, createConsole, type OutboxConsole } from '../src/index.js'
import { CLIENT_FREE_FAILURES } from '../src/login-backoff.js'

const t = useTestDatabase()
const ALICE = 'alice-token-K7q9Zr2mXv4Bn8Lp3Wd6'
const BOB = 'bob-token-Hs5Jf1Gq8Rt3Yu6Ie0Oa2'
const opened: OutboxConsole[] = []

function appWith(options: Omit<ConsoleOptions, 'db'>): express.Express {
  const mounted = createConsole({ db: t.db, ...options })
  opened.push(mounted)
  return express().use('/outbox', mounted)
}

afterAll(async () => {
  await Promise.all(opened.map((mounted) => mounted.close()))
})

/** What nginx sends by default in front of a console at 127.0.0.1:8080, reached as https://console.example.com. */
const NGINX = {
  Host: '127.0.0.1:8080',
  Origin: 'https://console.example.com',
  'X-Forwarded-Host': 'console.example.com',
  'X-Forwarded-Proto': 'https',
  'X-Forwarded-For': '203.0.113.9',
}

describe('behind a TLS proxy', () => {
  it('with trustProxy: signs in through nginx’s Host rewrite, with a Secure cookie, and still refuses another origin', async () => {
    const app = appWith({ token: ALICE, actor: 'alice', trustProxy: true, logger: silentLogger })
    const response = await request(app).post('/outbox/login').set(NGINX).type('form').send({ token: ALICE })
    expect(response.status).toBe(303)
    expect(String(response.headers['set-cookie'])).toMatch(/; Secure/)
    const evil = await request(app)
      .post('/outbox/login')
      .set({ ...NGINX, Origin: 'https://evil.example' })
      .type('form')
      .send({ token: ALICE })
    expect(evil.status).toBe(403)
  })

  it('without trustProxy: the forwarded headers are anyone’s words, and count for nothing', async () => {
    const app = appWith({ token: ALICE, actor: 'alice', logger: silentLogger })
    const refused = await request(app).post('/outbox/login').set(NGINX).type('form').send({ token: ALICE })
    expect(refused.status).toBe(403)
    const direct = await request(app)
      .post('/outbox/login')
      .set('X-Forwarded-Proto', 'https')
      .type('form')
      .send({ token: ALICE })
    expect(direct.status).toBe(303)
    expect(String(direct.headers['set-cookie'])).not.toMatch(/Secure/)
  })
})

describe('login throttle', () => {
  it('answers 429 with Retry-After once a client failed too often, even for the right token, and logs once', async () => {
    const warnings: string[] = []
    const logger: Logger = { ...silentLogger, warn: (_fields, message) => warnings.push(message) }
    const app = appWith({ token: ALICE, actor: 'alice', trustProxy: true, logger })
    const from = (client: string) => ({ 'X-Forwarded-For': client })
    for (let i = 0; i < CLIENT_FREE_FAILURES; i++) {
      const failed = await request(app)
        .post('/outbox/login')
        .set(from('198.51.100.7'))
        .type('form')
        .send({ token: 'guess' })
      expect(failed.status).toBe(401)
    }
    for (const token of ['guess', ALICE]) {
      const throttled = await request(app)
        .post('/outbox/login')
        .set(from('198.51.100.7'))
        .type('form')
        .send({ token })
      expect(throttled.status).toBe(429)
      expect(Number(throttled.headers['retry-after'])).toBeGreaterThanOrEqual(1)
      expect(throttled.headers['set-cookie']).toBeUndefined()
    }
    expect(warnings).toEqual([
      expect.stringContaining(`${CLIENT_FREE_FAILURES} failed sign-ins from 198.51.100.7`),
    ])
    // Another client signs in as usual.
    const other = await request(app)
      .post('/outbox/login')
      .set(from('192.0.2.1'))
      .type('form')
      .send({ token: ALICE })
    expect(other.status).toBe(303)
  })
})

describe('outcome banner and actor', () => {
  let deadEventId: string
  beforeAll(async () => {
    const sink = await startSink(() => ({ status: 500, body: 'down' }))
    try {
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(trx, { aggregateType: 'order', aggregateId: '1', eventType: 'order.created', payload: {} }),
        )
      const relay = new Relay({
        db: t.db,
        endpoint: sink.url,
        retrySchedule: [],
        listen: false,
        logger: silentLogger,
      })
      await relay.runOnce()
      await relay.stop()
    } finally {
      await sink.close()
    }
    deadEventId = (await listDeadLetters(t.db))[0]!.eventId
  })

  it('shows no banner for text in the query', async () => {
    const app = appWith({ token: BOB, logger: silentLogger })
    for (const query of ['?error=Session+expired%3A+call+555-0100', '?ok=All+good', '?flash=forged.value']) {
      const page = await request(app).get(`/outbox/${query}`).set('Authorization', `Bearer ${BOB}`)
      expect(page.status).toBe(200)
      expect(page.text).not.toContain('class="flash')
    }
  })

  it('shows the server’s own outcome after an action, and records the actor named for the token', async () => {
    const app = appWith({
      tokens: [
        { actor: 'alice', token: ALICE },
        { actor: 'bob', token: BOB },
      ],
      actions: true,
      logger: silentLogger,
    })
    // Alice signs in with her own token: the audit log names her, not "token".
    const login = await request(app).post('/outbox/login').type('form').send({ token: ALICE })
    const cookie = String(login.headers['set-cookie']).split(';')[0]!
    const form = await request(app).get('/outbox/dead-letters').set('Cookie', cookie)
    const csrf = /name="_csrf" value="([^"]+)"/.exec(form.text)![1]!
    const redriven = await request(app)
      .post('/outbox/dead-letters/redrive')
      .set('Cookie', cookie)
      .type('form')
      .send({ [CSRF_FIELD]: csrf, eventId: deadEventId })
    expect(redriven.status).toBe(303)
    const after = await request(app).get(redriven.headers.location!).set('Cookie', cookie)
    expect(after.text).toContain(
      `<p class="flash ok" role="status">Redriven: event ${deadEventId} is pending again.</p>`,
    )
    const [entry] = await listAudit(t.db, { limit: 1 })
    expect(entry).toMatchObject({ actor: 'alice', action: 'dead-letters.redrive' })
  })
})
