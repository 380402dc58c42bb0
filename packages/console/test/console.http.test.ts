import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import {
  checkIntegrity,
  createSubscription,
  deleteSubscription,
  disableSubscription,
  enqueue,
  getSubscription,
  listDeadLetters,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import { sql } from 'kysely'
import request from 'supertest'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type ConsoleOptions, CSRF_FIELD, createConsole, type OutboxConsole } from '../src/index.js'

const t = useTestDatabase()
const TOKEN = 'console-test-token-0123456789'
const CSP =
  "default-src 'none';script-src 'self';style-src 'self';img-src 'self' data:;connect-src 'self';form-action 'self';frame-ancestors 'none';base-uri 'none'"
const opened: OutboxConsole[] = []

/** An admin app with the console mounted at /outbox. */
function appWith(options: Omit<ConsoleOptions, 'db'>): express.Express {
  const mounted = createConsole({ db: t.db, ...options })
  opened.push(mounted)
  return express().use('/outbox', mounted)
}

let actingApp: express.Express
let readOnlyApp: express.Express
let hookApp: express.Express
let deadEventId: string

beforeAll(async () => {
  actingApp = appWith({ token: TOKEN, actions: true })
  readOnlyApp = appWith({ token: TOKEN })
  // The host app's own users: `x-user: alice` may act, `bob` may only look, anyone else is refused.
  hookApp = appWith({
    actions: true,
    authorize: (req) => {
      const name = req.headers['x-user']
      if (name === 'alice') return { actor: 'alice', canAct: true }
      if (name === 'bob') return { actor: 'bob', canAct: false }
      return null
    },
  })
  // A dead letter whose subscriber answered with a script, and whose payload holds control characters.
  const sink = await startSink(() => ({ status: 500, body: '<script>window.__pwned=1</script>\u001b[31m' }))
  try {
    await t.db.transaction().execute((trx) =>
      enqueue(trx, {
        aggregateType: 'order',
        aggregateId: 'o\u0007\u202e1',
        eventType: 'order.created',
        payload: { note: 'bell\u0007 and \u202eevil' },
      }),
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
  const [dead] = await listDeadLetters(t.db)
  deadEventId = dead!.eventId
  expect(dead!.lastError).toContain('<script>')
})

afterAll(async () => {
  await Promise.all(opened.map((mounted) => mounted.close()))
})

const bearer = { Authorization: `Bearer ${TOKEN}` }

async function login(app: express.Express): Promise<{ cookie: string; csrf: string }> {
  const response = await request(app).post('/outbox/login').type('form').send({ token: TOKEN })
  expect(response.status).toBe(303)
  const cookie = String(response.headers['set-cookie']).split(';')[0]!
  const page = await request(app).get('/outbox/dead-letters').set('Cookie', cookie)
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1]
  expect(csrf).toBeDefined()
  return { cookie, csrf: csrf! }
}

/** The outcome banner of the page an action redirected to: the server's words, sealed in the query. */
async function banner(location: string, cookie: string): Promise<string | undefined> {
  const page = await request(actingApp).get(location).set('Cookie', cookie)
  return /<p class="flash \w+" role="status">([^<]*)<\/p>/.exec(page.text)?.[1]
}

describe('authentication', () => {
  it('answers 401 without credentials: a page with the login link, or JSON for an API client', async () => {
    const page = await request(actingApp).get('/outbox/')
    expect(page.status).toBe(401)
    expect(page.text).toContain('href="/outbox/login"')
    const json = await request(actingApp).get('/outbox/api/lag').set('Accept', 'application/json')
    expect(json.status).toBe(401)
    expect(json.body).toEqual({ error: 'unauthorized', login: '/outbox/login' })
  })

  it('lets a bearer token in, and refuses a wrong one', async () => {
    const ok = await request(actingApp).get('/outbox/').set(bearer)
    expect(ok.status).toBe(200)
    expect(ok.text).toContain('<h1>Overview</h1>')
    expect(ok.text).toContain('This page refreshes every 5 s.')
    const wrong = await request(actingApp).get('/outbox/').set('Authorization', `Bearer ${TOKEN}x`)
    expect(wrong.status).toBe(401)
  })

  it('exchanges the token once for an HttpOnly, SameSite=Strict session cookie scoped to the mount path', async () => {
    const failed = await request(actingApp).post('/outbox/login').type('form').send({ token: 'nope' })
    expect(failed.status).toBe(401)
    expect(failed.headers['set-cookie']).toBeUndefined()
    const response = await request(actingApp).post('/outbox/login').type('form').send({ token: TOKEN })
    expect(response.status).toBe(303)
    expect(response.headers.location).toBe('/outbox/')
    const setCookie = String(response.headers['set-cookie'])
    expect(setCookie).toMatch(/HttpOnly/)
    expect(setCookie).toMatch(/SameSite=Strict/)
    expect(setCookie).toMatch(/Path=\/outbox;/)
    expect(setCookie).not.toMatch(/Secure/)
    const cookie = setCookie.split(';')[0]!
    expect((await request(actingApp).get('/outbox/').set('Cookie', cookie)).status).toBe(200)
    expect((await request(actingApp).get('/outbox/').set('Cookie', 'outbox_console=forged')).status).toBe(401)
  })

  it('asks the authorize hook: null is 401, a read-only user sees no buttons and may not POST', async () => {
    expect((await request(hookApp).get('/outbox/dead-letters').set('x-user', 'mallory')).status).toBe(401)
    const bob = await request(hookApp).get('/outbox/dead-letters').set('x-user', 'bob')
    expect(bob.status).toBe(200)
    expect(bob.text).toContain('bob (read only)')
    expect(bob.text).not.toContain('/outbox/dead-letters/redrive')
    const csrf = /name="_csrf" value="([^"]+)"/.exec(bob.text)?.[1]
    const post = await request(hookApp)
      .post('/outbox/dead-letters/redrive')
      .set('x-user', 'bob')
      .type('form')
      .send({ [CSRF_FIELD]: csrf ?? '', eventId: deadEventId })
    expect(post.status).toBe(403)
    const alice = await request(hookApp).get('/outbox/dead-letters').set('x-user', 'alice')
    expect(alice.text).toContain('action="/outbox/dead-letters/redrive"')
  })

  it('refuses to be created without a token or an authorize hook', () => {
    expect(() => createConsole({ db: t.db })).toThrow(/token.*authorize/)
    expect(() => createConsole({ db: t.db, token: 'short' })).toThrow(/at least 22 are needed/)
    expect(() => createConsole({ db: t.db, token: 'passwordpassword' })).toThrow(/at least 22 are needed/)
    expect(() => createConsole({ db: t.db, token: 'passwordpasswordpassword' })).toThrow(/at least 16/)
  })
})

describe('forgery and read-only guards', () => {
  it('refuses a session POST without the form token, and a bearer POST from another origin', async () => {
    const { cookie } = await login(actingApp)
    const noToken = await request(actingApp)
      .post('/outbox/dead-letters/redrive')
      .set('Cookie', cookie)
      .type('form')
      .send({ eventId: deadEventId })
    expect(noToken.status).toBe(403)
    const crossOrigin = await request(actingApp)
      .post('/outbox/dead-letters/redrive')
      .set(bearer)
      .set('Origin', 'http://evil.example')
      .type('form')
      .send({ eventId: deadEventId })
    expect(crossOrigin.status).toBe(403)
    const crossSite = await request(actingApp)
      .post('/outbox/dead-letters/redrive')
      .set(bearer)
      .set('Sec-Fetch-Site', 'cross-site')
      .type('form')
      .send({ eventId: deadEventId })
    expect(crossSite.status).toBe(403)
    // Another port of this host is the same site, not the same origin; `Origin: null` passes only when the
    // browser also says same-origin (what Chromium sends from the console's no-referrer pages).
    for (const headers of [
      { 'Sec-Fetch-Site': 'same-site' },
      { Origin: 'null' },
      { Origin: 'null', 'Sec-Fetch-Site': 'same-site' },
    ]) {
      const refused = await request(actingApp)
        .post('/outbox/dead-letters/redrive')
        .set(bearer)
        .set(headers)
        .type('form')
        .send({ eventId: deadEventId })
      expect(refused.status, JSON.stringify(headers)).toBe(403)
    }
    const crossSiteLogin = await request(actingApp)
      .post('/outbox/login')
      .set('Origin', 'http://evil.example')
      .type('form')
      .send({ token: TOKEN })
    expect(crossSiteLogin.status).toBe(403)
    // Nothing was redriven by any of them.
    expect((await listDeadLetters(t.db)).map((dead) => dead.eventId)).toEqual([deadEventId])
  })

  it('without actions: no buttons, and a well-formed POST is still refused', async () => {
    const page = await request(readOnlyApp).get('/outbox/dead-letters').set(bearer)
    expect(page.text).toContain(deadEventId)
    expect(page.text).not.toContain('<button type="submit">Redrive')
    const post = await request(readOnlyApp)
      .post('/outbox/dead-letters/redrive')
      .set(bearer)
      .type('form')
      .send({ eventId: deadEventId })
    expect(post.status).toBe(403)
    expect(post.text).toContain('read-only')
  })

  it('sends the exact CSP, nosniff, no-referrer and no-store on every response', async () => {
    for (const path of ['/outbox/', '/outbox/login', '/outbox/assets/console.js']) {
      const response = await request(actingApp).get(path).set(bearer)
      expect(response.headers['content-security-policy'], path).toBe(CSP)
      expect(response.headers['x-content-type-options'], path).toBe('nosniff')
      expect(response.headers['referrer-policy'], path).toBe('no-referrer')
      expect(response.headers['cache-control'], path).toBe('no-store')
    }
  })

  it('has no inline script or style in any page', async () => {
    for (const path of [
      '/outbox/',
      '/outbox/dead-letters',
      `/outbox/events/${deadEventId}`,
      '/outbox/audit',
    ]) {
      const { text } = await request(actingApp).get(path).set(bearer)
      expect(text, path).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
      expect(text, path).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i)
    }
  })
})

describe('rendering', () => {
  it('shows a subscriber’s <script> answer as text, escaped', async () => {
    const { text } = await request(actingApp).get('/outbox/dead-letters').set(bearer)
    expect(text).toContain('&lt;script&gt;window.__pwned=1&lt;/script&gt;')
    expect(text).not.toContain('<script>window.__pwned')
  })

  it('shows control characters as \\u escapes: a bell and a right-to-left override in an aggregate id', async () => {
    const list = await request(actingApp).get('/outbox/dead-letters').set(bearer)
    expect(list.text).not.toContain('\u0007')
    expect(list.text).not.toContain('\u202e')
    expect(list.text).toContain('order/o\\u0007\\u202e1 #1')
    const { text } = await request(actingApp).get(`/outbox/events/${deadEventId}`).set(bearer)
    expect(text).toContain('&lt;script&gt;window.__pwned=1&lt;/script&gt;')
    // The payload, pretty-printed: JSON escapes the bell itself; the override is shown by the console's escape.
    expect(text).toContain('&quot;note&quot;: &quot;bell\\u0007 and \\u202eevil&quot;')
    expect(text).not.toContain('\u202e')
    // The last answer, from the delivery log.
    expect(text).toMatch(/<h3>Last answer<\/h3>\s*<pre class="answer">&quot;&lt;script&gt;/)
  })

  it('never shows a database URL or a signing secret', async () => {
    const { text } = await request(actingApp).get('/outbox/').set(bearer)
    expect(text).not.toContain('postgres://')
    expect(text).not.toContain('whsec_')
  })
})

describe('redrive one dead letter', () => {
  it('redrives from a session form with its token and records the actor', async () => {
    const { cookie, csrf } = await login(actingApp)
    const response = await request(actingApp)
      .post('/outbox/dead-letters/redrive')
      .set('Cookie', cookie)
      .type('form')
      .send({ [CSRF_FIELD]: csrf, eventId: deadEventId })
    expect(response.status).toBe(303)
    expect(response.headers.location).toMatch(/^\/outbox\/dead-letters\?flash=/)
    expect(await listDeadLetters(t.db)).toEqual([])
    const flash = await request(actingApp).get(response.headers.location!).set('Cookie', cookie)
    expect(flash.text).toContain(`Redriven: event ${deadEventId} is pending again.`)
  })
})

describe('reads', () => {
  it('serves the chart data: throughput buckets and lag samples', async () => {
    const throughput = await request(actingApp).get('/outbox/api/throughput').set(bearer)
    expect(throughput.body.bucketMs).toBe(60_000)
    expect(throughput.body.buckets).toHaveLength(60)
    const lag = await request(actingApp).get('/outbox/api/lag').set(bearer)
    expect(lag.body.intervalMs).toBe(5000)
    // The sampler took one at creation.
    expect(lag.body.samples.length).toBeGreaterThanOrEqual(1)
    expect(lag.body.samples[0]).toEqual({ at: expect.any(Number), lagSeconds: expect.any(Number) })
  })

  it('gives up on a page whose read waits past statementTimeoutMs: 503, and the pool is free again', async () => {
    const quick = appWith({ token: TOKEN, statementTimeoutMs: 300 })
    const locker = t.connect({ max: 1 })
    const held = deferredRelease()
    const locked = deferredRelease()
    // An ACCESS EXCLUSIVE lock on the outbox stands for a read that would take forever.
    const holding = locker.transaction().execute(async (trx) => {
      await sql`LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`.execute(trx)
      locked.release()
      await held.promise
    })
    await locked.promise
    try {
      const started = Date.now()
      const slow = await request(quick).get('/outbox/dead-letters').set(bearer)
      expect(slow.status).toBe(503)
      expect(slow.text).toContain('did not answer within 300 ms')
      // Without the deadline the read waits for the lock for ever: any bound tells them apart, so a generous one.
      expect(Date.now() - started).toBeLessThan(30_000)
    } finally {
      held.release()
      await holding
    }
    expect((await request(quick).get('/outbox/dead-letters').set(bearer)).status).toBe(200)
  })
})

function deferredRelease() {
  let release!: () => void
  const promise = new Promise<void>((resolve) => {
    release = resolve
  })
  return { promise, release }
}

describe('discard preview', () => {
  it('shows the refusal for a lane’s blocker, and the preview once their lanes may be unblocked', async () => {
    const sink = await startSink(() => ({ status: 422, body: 'no' }))
    const subscription = await createSubscription(t.db, {
      name: 'blocking',
      url: sink.url,
      eventTypes: ['blocking.*'],
      onExhausted: 'block',
    })
    try {
      for (const n of [1, 2]) {
        await t.db.transaction().execute((trx) =>
          enqueue(trx, {
            aggregateType: 'acct',
            aggregateId: 'a-1',
            eventType: 'blocking.step',
            payload: { n },
          }),
        )
      }
      const relay = new Relay({
        db: t.db,
        retrySchedule: [],
        allowPrivateNetworks: true,
        listen: false,
        logger: silentLogger,
      })
      await relay.runOnce()
      await relay.stop()
    } finally {
      await sink.close()
    }
    const { cookie, csrf } = await login(actingApp)
    const form = { [CSRF_FIELD]: csrf, subscription: subscription.id }
    const refused = await request(actingApp)
      .post('/outbox/dead-letters/discard')
      .set('Cookie', cookie)
      .type('form')
      .send(form)
    expect(refused.status).toBe(200)
    expect(refused.text).toContain('unblockLanes: true')
    expect(refused.text).toContain('Preview again, unblocking their lanes')
    const preview = await request(actingApp)
      .post('/outbox/dead-letters/discard')
      .set('Cookie', cookie)
      .type('form')
      .send({ ...form, unblockLanes: '1' })
    expect(preview.text).toContain(
      'would delete <b>1</b> dead letters for good and resume <b>1</b> blocked lanes',
    )
    // A dry run: still dead, still blocked.
    expect(await listDeadLetters(t.db, { subscriptionId: subscription.id })).toHaveLength(1)
    const done = await request(actingApp)
      .post('/outbox/dead-letters/discard')
      .set('Cookie', cookie)
      .type('form')
      .send({ ...form, unblockLanes: '1', confirm: '1' })
    expect(done.status).toBe(303)
    expect(await banner(done.headers.location!, cookie)).toContain(
      'Discarded 1 dead letters; resumed 1 lanes.',
    )
    expect(await listDeadLetters(t.db, { subscriptionId: subscription.id })).toEqual([])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    const audit = await request(actingApp).get('/outbox/audit').set('Cookie', cookie)
    expect(audit.text).toContain('dead-letters.discard')
  })
})

describe('lanes', () => {
  it('lists a 409-parked lane with both fixes, and skips its head from the form', async () => {
    const sink = await startSink(() => ({ status: 409, body: { status: 'out_of_order' } }))
    const subscription = await createSubscription(t.db, {
      name: 'parked',
      url: sink.url,
      eventTypes: ['parked.*'],
    })
    try {
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(trx, { aggregateType: 'cart', aggregateId: 'c-1', eventType: 'parked.step', payload: {} }),
        )
      const relay = new Relay({ db: t.db, allowPrivateNetworks: true, listen: false, logger: silentLogger })
      await relay.runOnce()
      await relay.stop()
    } finally {
      await sink.close()
    }
    const { cookie, csrf } = await login(actingApp)
    const page = await request(actingApp).get('/outbox/lanes?state=blocked').set('Cookie', cookie)
    expect(page.text).toContain('cart/c-1')
    expect(page.text).toContain('parked: the consumer answered 409')
    expect(page.text).toContain('action="/outbox/lanes/unblock"')
    expect(page.text).toContain('action="/outbox/lanes/skip-head"')
    const skipped = await request(actingApp)
      .post('/outbox/lanes/skip-head')
      .set('Cookie', cookie)
      .type('form')
      .send({
        [CSRF_FIELD]: csrf,
        subscriptionId: subscription.id,
        aggregateType: 'cart',
        aggregateId: 'c-1',
      })
    expect(skipped.status).toBe(303)
    expect(await banner(skipped.headers.location!, cookie)).toContain('Skipped cart/c-1 #1')
    const [dead] = await listDeadLetters(t.db, { subscriptionId: subscription.id })
    expect(dead?.lastError).toMatch(/^skipped by token/)
    expect((await checkIntegrity(t.db)).violations).toEqual([])
    // The same form again: nothing left to skip, said on the page, not a 500.
    const again = await request(actingApp)
      .post('/outbox/lanes/skip-head')
      .set('Cookie', cookie)
      .type('form')
      .send({
        [CSRF_FIELD]: csrf,
        subscriptionId: subscription.id,
        aggregateType: 'cart',
        aggregateId: 'c-1',
      })
    expect(again.status).toBe(303)
    const refusal = await request(actingApp).get(again.headers.location!).set('Cookie', cookie)
    expect(refusal.text).toMatch(/class="flash error"[^>]*>Could not skip the head of cart\/c-1/)
  })

  it('answers a bad filter with 400 and the producer’s message', async () => {
    const bad = await request(actingApp).get('/outbox/dead-letters?status=abc').set(bearer)
    expect(bad.status).toBe(400)
    expect(bad.text).toContain('status')
  })
})

describe('overview: subscriptions disabled automatically', () => {
  it('shows a subscription a 410 disabled, with its reason and since when, and nothing of an operator’s pause', async () => {
    const gone = await startSink(() => ({ status: 410 }))
    const retired = await createSubscription(t.db, {
      url: `${gone.url}?key=not-for-the-page`,
      name: 'retired',
    })
    const paused = await createSubscription(t.db, { url: 'http://127.0.0.1:9/paused', name: 'paused' })
    try {
      const quiet = await request(readOnlyApp).get('/outbox/').set(bearer)
      expect(quiet.text).not.toContain('Disabled automatically')
      await disableSubscription(t.db, paused.id, { reason: 'maintenance window' })
      await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'gone-1',
          eventType: 'order.created',
          payload: {},
        }),
      )
      const relay = new Relay({ db: t.db, allowPrivateNetworks: true, listen: false, logger: silentLogger })
      await relay.runOnce()
      await relay.stop()
      const disabledAt = (await getSubscription(t.db, retired.id))?.disabledAt
      expect(disabledAt).toBeInstanceOf(Date)

      const page = await request(readOnlyApp).get('/outbox/').set(bearer)
      expect(page.status).toBe(200)
      const section = /<section class="auto-disabled">([\s\S]*?)<\/section>/.exec(page.text)?.[1] ?? ''
      expect(section).toContain('Disabled automatically')
      const row =
        new RegExp(`<tr data-subscription="${retired.id}">([\\s\\S]*?)</tr>`).exec(section)?.[1] ?? ''
      expect(row).toContain('retired')
      expect(row).toContain('gone: its endpoint answered 410 Gone')
      expect(row).toContain(disabledAt!.toISOString().slice(0, 19).replace('T', ' '))
      // The operator's own pause is theirs to know: not listed as automatic, and its free text is not shown there.
      expect(section).not.toContain('paused')
      // The endpoint's host only, never its query string.
      expect(page.text).not.toContain('not-for-the-page')
    } finally {
      await gone.close()
      await deleteSubscription(t.db, retired.id)
      await deleteSubscription(t.db, paused.id)
    }
  })
})

describe('the bin', () => {
  it('refuses to start without a token, naming the flag and the variable (exit 2)', async () => {
    const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url))
    const env = { ...process.env, OUTBOX_CONSOLE_TOKEN: '', DATABASE_URL: t.url }
    const failure = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--conditions=@outbox/source', cli],
      { env },
    ).catch((error: { code: number; stderr: string; stdout: string }) => error)
    expect(failure).toMatchObject({ code: 2 })
    expect((failure as { stderr: string }).stderr).toMatch(/--token.*OUTBOX_CONSOLE_TOKEN/)
    expect((failure as { stderr: string }).stderr).not.toMatch(/\n\s+at /)
  })
})
