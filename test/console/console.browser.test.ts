/**
 * The console in a real Chromium (playwright-core driving the machine's own browser: `CHROMIUM_PATH` or a usual
 * install path, never a downloaded one), against a real relay, real sinks and the console mounted on an express app:
 * what an operator sees and clicks. Not under packages/: the PostgreSQL 14 pass runs only packages/*. Without a
 * Chromium the suite is skipped with a line in the run's summary (a failure under `OUTBOX_REQUIRE_ALL=1`).
 *
 * Budget: the whole file in ≤ 90 s on the 2-core CI machine (measured 13–20 s wall on such a machine, Chromium start
 * included); nothing waits a fixed time, every wait is for a page state or a sink's request. `UPDATE_SCREENSHOTS=1` rewrites packages/console/docs/*.png.
 */
import { mkdirSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { createConsole, type OutboxConsole } from '@outbox/console'
import {
  checkIntegrity,
  createSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  listDeadLetters,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { findChromium, requires, type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import { type Browser, chromium, type Locator, type Page } from 'playwright-core'
import { afterAll, beforeAll, expect, it } from 'vitest'

/** Chromium where the machine has one (`CHROMIUM_PATH`, then the usual install paths); else the suite is skipped. */
const withChromium = requires('console browser suite', findChromium())
const t = useTestDatabase()
const TOKEN = 'browser-suite-token-0123456789'
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1'
const DOCS = fileURLToPath(new URL('../../packages/console/docs/', import.meta.url))
const SCRIPT_BODY = '<script>window.__pwned=1</script>'
const DESKTOP = { width: 1280, height: 800 }
/** An iPhone's viewport in CSS pixels: the width an operator on call reads the console at. */
const PHONE = { width: 375, height: 812 }

let browser: Browser
let page: Page
let relay: Relay
let outboxConsole: OutboxConsole
let server: ReturnType<express.Express['listen']>
let evilServer: ReturnType<express.Express['listen']>
let base: string
let evilOrigin: string
const sinks: Sink[] = []
/** The shop's subscriber fails `order.poison` while this is true. */
let shopRejectsPoison = true
const cspViolations: string[] = []
/** Subscription ids by name. */
const subscriptionIds = new Map<string, string>()

async function enqueueEvent(eventType: string, aggregateId: string, payload: Record<string, unknown> = {}) {
  return t.db
    .transaction()
    .execute((trx) => enqueue(trx, { aggregateType: 'order', aggregateId, eventType, payload }))
}

function listen(app: express.Express): Promise<ReturnType<express.Express['listen']>> {
  return new Promise((resolve) => {
    const started = app.listen(0, '127.0.0.1', () => resolve(started))
  })
}

/** The text of a figure on the overview (`data-figure`), e.g. pending. */
function figure(name: string) {
  return page.locator(`main [data-figure="${name}"]`)
}

/**
 * The width, in CSS pixels, that a table's column `header` leaves for the text of its cell in `row` (the cell's inner
 * width, without its padding, which holds the column's label on a narrow screen).
 */
async function columnTextWidth(table: string, header: string, row: Locator): Promise<number> {
  const headers = await page.locator(`main table.${table} thead th`).allTextContents()
  const index = headers.indexOf(header)
  expect(index, `${header} in ${headers.join(', ')}`).toBeGreaterThanOrEqual(0)
  return row
    .locator('td')
    .nth(index)
    .evaluate((cell) => {
      const style = (globalThis as any).getComputedStyle(cell)
      return cell.clientWidth - Number.parseFloat(style.paddingLeft) - Number.parseFloat(style.paddingRight)
    })
}

/** Whether the page is wider than the window: something makes the reader scroll sideways. */
function scrollsSideways(): Promise<boolean> {
  return page.evaluate(() => {
    const root = (globalThis as any).document.documentElement
    return root.scrollWidth > root.clientWidth
  })
}

/** The overview row of one subscription. */
function row(name: string) {
  return page.locator('main table.subscriptions tbody tr', { hasText: name })
}

withChromium.describe('the console in Chromium', () => {
  beforeAll(async () => {
    await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
    const shop = await startSink((request) =>
      request.json?.type === 'order.poison' && shopRejectsPoison
        ? { status: 500, body: 'poison rejected' }
        : { status: 200, body: { status: 'applied' } },
    )
    const flaky = await startSink(() => ({ status: 500, body: SCRIPT_BODY }))
    const ordered = await startSink((request) =>
      request.json?.data?.poison
        ? { status: 422, body: 'cannot apply' }
        : { status: 200, body: { status: 'applied' } },
    )
    sinks.push(shop, flaky, ordered)
    const created = [
      await createSubscription(t.db, { name: 'shop', url: shop.url, eventTypes: ['order.*'] }),
      await createSubscription(t.db, { name: 'flaky', url: flaky.url, eventTypes: ['flaky.*'] }),
    ]
    subscriptionIds.set('shop', created[0]!.id).set('flaky', created[1]!.id)
    await createSubscription(t.db, {
      name: 'ordered',
      url: ordered.url,
      eventTypes: ['ledger.*'],
      onExhausted: 'block',
    })
    relay = new Relay({
      db: t.db,
      allowPrivateNetworks: true,
      retrySchedule: [],
      pollIntervalMs: 200,
      endpointBreaker: { failures: 2, cooldownMs: 600_000 },
      logger: silentLogger,
    })
    outboxConsole = createConsole({ db: t.db, token: TOKEN, actions: true, refreshMs: 500 })
    server = await listen(express().use('/outbox', outboxConsole))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/outbox`
    // Another origin (same host, another port) whose page posts a form to the console.
    const evil = express().get('/', (_request, response) => {
      response.type('html').send(`<!doctype html><form method="post" action="${base}/dead-letters/redrive">
        <input name="eventId" value="00000000-0000-4000-8000-000000000000"><button id="go">go</button></form>`)
    })
    evilServer = await listen(evil)
    evilOrigin = `http://127.0.0.1:${(evilServer.address() as AddressInfo).port}`
    browser = await chromium.launch({
      executablePath: withChromium.value,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    })
    page = await browser.newPage({ viewport: DESKTOP })
    page.setDefaultTimeout(15_000)
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text())
    })
    if (SCREENSHOTS) mkdirSync(DOCS, { recursive: true })
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await relay?.stop({ timeoutMs: 0 })
    await outboxConsole?.close()
    server?.close()
    evilServer?.close()
    await Promise.all(sinks.map((sink) => sink.close()))
  })

  it('signs in with the token and shows counts moving as the relay delivers', async () => {
    for (let n = 0; n < 3; n++) await enqueueEvent('order.created', `o-${n}`)
    await page.goto(`${base}/login`)
    await page.fill('input[name="token"]', TOKEN)
    await page.click('button[type="submit"]')
    await page.waitForURL(`${base}/`)
    await expect.poll(() => figure('pending').textContent()).toBe('3')
    await expect.poll(() => page.locator('main .refresh').textContent()).toContain('every 0.5 s')
    await relay.start()
    // The page refreshes itself: no reload, the figure changes in place.
    // (Functions, not strings: the console's CSP forbids eval, and playwright evaluates a string with it.)
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector('main [data-figure="pending"]')?.textContent === '0',
    )
    await page.waitForFunction(() => (globalThis as any).document.body.dataset.charted === 'true')
    await expect.poll(() => page.locator('#chart-throughput canvas').count()).toBe(1)
    await expect.poll(() => page.locator('#chart-lag canvas').count()).toBe(1)
  })

  it('shows a failing endpoint’s breaker as open', async () => {
    await enqueueEvent('flaky.ping', 'f-1')
    await enqueueEvent('flaky.ping', 'f-2')
    await expect.poll(() => row('flaky').locator('.breaker').textContent(), { timeout: 20_000 }).toBe('open')
    await expect.poll(() => row('flaky').locator('.failure').textContent()).toBe('HTTP 500')
    if (SCREENSHOTS) await page.screenshot({ path: `${DOCS}overview.png`, fullPage: true })
  })

  it('finds a blocked lane from the overview in two clicks and fixes it with one: the events behind it delivered', async () => {
    await enqueueEvent('ledger.posted', 'L-1', { poison: true })
    await enqueueEvent('ledger.posted', 'L-1', { n: 2 })
    await enqueueEvent('ledger.posted', 'L-1', { n: 3 })
    await page.goto(`${base}/`)
    // The overview refreshes itself until the relay has blocked the lane.
    const blockedLink = page.locator('main a', { hasText: '1 blocked lanes' })
    await blockedLink.waitFor({ timeout: 20_000 })
    await blockedLink.click() // click 1
    await page.waitForURL(/\/lanes\?state=blocked/)
    const laneRow = page.locator('main table.lanes tbody tr', { hasText: 'order/L-1' })
    await expect.poll(() => laneRow.locator('.reason').textContent()).toContain('exhausted its retries')
    await expect.poll(() => laneRow.textContent()).toContain('cannot apply')
    if (SCREENSHOTS) await page.screenshot({ path: `${DOCS}lanes.png`, fullPage: true })
    await laneRow.locator('button', { hasText: 'Unblock' }).click() // click 2: the one action
    await expect.poll(() => page.locator('main .flash.ok').textContent()).toContain('Unblocked order/L-1')
    const ordered = sinks[2]!
    await expect
      .poll(
        () =>
          ordered.requests
            .filter((request) => request.json?.aggregate_id === 'L-1')
            .map((r) => r.json.sequence),
        {
          timeout: 20_000,
        },
      )
      .toEqual([1, 2, 3])
    expect((await checkIntegrity(t.db)).violations).toEqual([])
  })

  it('shows a subscriber’s <script> answer as text, never running it', async () => {
    await page.click('text=dead letters')
    await page.selectOption('select[name="subscription"]', { label: 'flaky' })
    await page.click('form.filters button[type="submit"]')
    await expect.poll(() => page.locator('main table.dead-letters tbody tr').count()).toBe(2)
    await expect.poll(() => page.locator('main .error-text').first().textContent()).toContain(SCRIPT_BODY)
    expect(await page.evaluate(() => typeof (globalThis as any).__pwned)).toBe('undefined')
  })

  it('at phone width, a failure’s and a dead letter’s error get the screen’s width, not a sliver of it', async () => {
    await page.setViewportSize(PHONE)
    try {
      await page.goto(`${base}/`)
      await expect.poll(() => row('flaky').locator('.failure').textContent()).toBe('HTTP 500')
      // Measured on the table as it was, one column per field: 52 px for "Last failure" at this width.
      expect(await columnTextWidth('subscriptions', 'Last failure', row('flaky'))).toBeGreaterThan(
        PHONE.width / 2,
      )
      expect(await scrollsSideways()).toBe(false)

      await page.goto(`${base}/dead-letters?subscription=${subscriptionIds.get('flaky')}`)
      const dead = page.locator('main table.dead-letters tbody tr').first()
      await expect.poll(() => dead.locator('.error-text').textContent()).toContain(SCRIPT_BODY)
      expect(await columnTextWidth('dead-letters', 'Last error', dead)).toBeGreaterThan(PHONE.width / 2)
      expect(await scrollsSideways()).toBe(false)
    } finally {
      await page.setViewportSize(DESKTOP)
    }
    // At a desk the tables keep their columns.
    await page.goto(`${base}/`)
    expect(await page.locator('main table.subscriptions thead').isVisible()).toBe(true)
  })

  it('names the subscriptions of an event’s delivery log, their ids at hand', async () => {
    const flakyId = subscriptionIds.get('flaky')!
    const [dead] = (await listDeadLetters(t.db)).filter((letter) => letter.subscriptionId === flakyId)
    await page.goto(`${base}/events/${dead!.eventId}`)
    const log = page.locator('main pre.log')
    await expect.poll(() => log.textContent()).toContain('subscription flaky')
    expect(await log.textContent()).not.toContain(flakyId)
    expect(await log.locator('.subscription').first().getAttribute('title')).toBe(flakyId)
    await expect
      .poll(() => page.locator('main .subscription-ids').textContent())
      .toContain(`flaky: ${flakyId}`)
    expect(await page.locator('main section.dead h2').textContent()).toBe('Dead letter in flaky')
  })

  it('finds a dead letter by filter and redrives it from the page: delivered', async () => {
    const { eventId } = await enqueueEvent('order.poison', 'p-1')
    await expect
      .poll(async () => (await listDeadLetters(t.db)).map((dead) => dead.eventId))
      .toContain(eventId)
    await page.goto(`${base}/dead-letters`)
    await page.fill('input[name="eventType"]', 'order.poison')
    await page.click('form.filters button[type="submit"]')
    await expect.poll(() => page.locator('main table.dead-letters tbody tr').count()).toBe(1)
    const deadRow = page.locator('main table.dead-letters tbody tr', { hasText: eventId })
    await expect.poll(() => deadRow.count()).toBe(1)
    if (SCREENSHOTS) await page.screenshot({ path: `${DOCS}dead-letters.png`, fullPage: true })
    shopRejectsPoison = false
    await deadRow.locator('button', { hasText: 'Redrive' }).click()
    await expect
      .poll(() => page.locator('main .flash.ok').textContent())
      .toContain(`event ${eventId} is pending again`)
    const shop = sinks[0]!
    await expect
      .poll(() => shop.requests.filter((request) => request.json?.event_id === eventId).length, {
        timeout: 20_000,
      })
      .toBe(2)
    await page.goto(`${base}/audit`)
    await expect.poll(() => page.locator('main table.audit').textContent()).toContain('dead-letters.redrive')
    await expect.poll(() => page.locator('main table.audit').textContent()).toContain('lane.unblock')
    expect((await checkIntegrity(t.db)).violations).toEqual([])
  })

  it('answers 401 without the token, and refuses a form posted from another origin', async () => {
    const stranger = await browser.newPage()
    try {
      const response = await stranger.goto(`${base}/`)
      expect(response?.status()).toBe(401)
      expect(await stranger.locator('a[href$="/login"]').count()).toBe(1)
    } finally {
      await stranger.close()
    }
    // The signed-in browser visits another origin whose form posts to the console: its cookie goes along
    // (127.0.0.1 on another port is the same site), but the Origin is not the console's.
    await page.goto(evilOrigin)
    const [refused] = await Promise.all([
      page.waitForResponse((response) => response.url() === `${base}/dead-letters/redrive`),
      page.click('#go'),
    ])
    expect(refused.status()).toBe(403)
    expect(cspViolations).toEqual([])
  })
})
