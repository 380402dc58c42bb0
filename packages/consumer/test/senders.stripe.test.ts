import { randomBytes } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import Stripe from 'stripe'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, OutboxError, stripeEnvelope, stripeVerifier } from '../src/index.js'
import {
  createReceivedEffects,
  effectsOf,
  postUnfinished,
  processedRows,
  serve,
  writeReceived,
} from './sender-support.js'
import { post, quiet } from './support.js'

const t = useTestDatabase()
const secret = `whsec_${randomBytes(24).toString('hex')}`
let server: { url: string; close: () => Promise<void> }
let calls = 0

beforeAll(async () => {
  await createReceivedEffects(t.db)
  const consumer = createConsumer({
    db: t.db,
    verify: stripeVerifier(secret),
    envelope: stripeEnvelope,
    source: 'stripe',
    logger: quiet,
  })
  server = await serve(
    consumer.node(async (event, trx) => {
      calls++
      await writeReceived(trx, event)
    }),
  )
})

afterAll(async () => {
  await server?.close()
})

/** A Stripe event as Stripe's API documents it (snapshot event, an invoice). */
function stripeEvent(type = 'invoice.paid') {
  const created = Math.floor(Date.now() / 1000) - 5
  return {
    id: `evt_${randomBytes(12).toString('hex')}`,
    object: 'event',
    api_version: '2025-10-29.clover',
    created,
    type,
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    data: { object: { id: `in_${randomBytes(8).toString('hex')}`, object: 'invoice', amount_paid: 1200 } },
  }
}

/** Headers of one delivery attempt, signed by the `stripe` package's own test helper. */
function signed(payload: string, options: { secret?: string; timestamp?: number } = {}) {
  return {
    'content-type': 'application/json; charset=utf-8',
    'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
    'stripe-signature': Stripe.webhooks.generateTestHeaderString({
      payload,
      secret: options.secret ?? secret,
      ...(options.timestamp === undefined ? {} : { timestamp: options.timestamp }),
    }),
  }
}

async function nothingRecorded(eventId: string) {
  expect(await processedRows(t.db, 'stripe', eventId)).toEqual([])
  expect(await effectsOf(t.db, eventId)).toEqual([])
}

describe('Stripe: stripeVerifier + stripeEnvelope under sequence off', () => {
  it('applies an event signed by the stripe package once; its retry is duplicate_ignored', async () => {
    const event = stripeEvent()
    const payload = JSON.stringify(event, null, 2) // Stripe sends pretty-printed JSON
    const before = calls

    const first = await post(server.url, payload, signed(payload))
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: event.id })
    expect(calls).toBe(before + 1)
    const [effect, ...more] = await effectsOf(t.db, event.id)
    expect(more).toEqual([])
    expect(effect).toEqual({
      type: 'invoice.paid',
      data: event.data,
      occurred_at: new Date(event.created * 1000).toISOString(),
    })
    expect(await processedRows(t.db, 'stripe', event.id)).toMatchObject([
      { source: 'stripe', event_id: event.id, type: 'invoice.paid', aggregate_type: null, sequence: null },
    ])

    // Stripe re-signs each retry with a new timestamp; the event id stays.
    const retry = await post(server.url, payload, signed(payload, { timestamp: event.created + 60 }))
    expect(retry.status).toBe(200)
    expect(retry.json).toEqual({ status: 'duplicate_ignored', eventId: event.id })
    expect(calls).toBe(before + 1)
    expect(await effectsOf(t.db, event.id)).toHaveLength(1)
  })

  it('applies an event once when copies of it arrive at the same time', async () => {
    const event = stripeEvent('charge.refunded')
    const payload = JSON.stringify(event)
    const before = calls
    // Ten connections at once; each waits on the first's id row until it commits.
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => post(server.url, payload, signed(payload))),
    )
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(200))
    const statuses = answers.map((answer) => answer.json.status).sort()
    expect(statuses).toEqual(['applied', ...Array(9).fill('duplicate_ignored')])
    expect(calls).toBe(before + 1)
    expect(await effectsOf(t.db, event.id)).toHaveLength(1)
  })

  it('reads a thin event (no data snapshot, created as a date string) whole', async () => {
    const thin = {
      id: `evt_${randomBytes(12).toString('hex')}`,
      object: 'v2.core.event',
      type: 'v1.billing.meter.error_report_triggered',
      created: '2026-12-04T09:30:00.000Z',
      related_object: { id: 'mtr_123', type: 'billing.meter', url: '/v1/billing/meters/mtr_123' },
    }
    const payload = JSON.stringify(thin)
    const answer = await post(server.url, payload, signed(payload))
    expect(answer.json).toEqual({ status: 'applied', eventId: thin.id })
    expect(await effectsOf(t.db, thin.id)).toEqual([
      { type: thin.type, data: thin, occurred_at: '2026-12-04T09:30:00.000Z' },
    ])
  })

  it('refuses a tampered body with 401 invalid_signature and records nothing', async () => {
    const event = stripeEvent()
    const payload = JSON.stringify(event)
    const tampered = payload.replace('"amount_paid":1200', '"amount_paid":1')
    expect(tampered).not.toBe(payload)
    const answer = await post(server.url, tampered, signed(payload))
    expect(answer.status).toBe(401)
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    await nothingRecorded(event.id)
  })

  it('refuses a signature made with another secret, and an old one (timestamp_out_of_window)', async () => {
    const event = stripeEvent()
    const payload = JSON.stringify(event)
    const other = await post(
      server.url,
      payload,
      signed(payload, { secret: `whsec_${randomBytes(24).toString('hex')}` }),
    )
    expect(other.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    const old = await post(
      server.url,
      payload,
      signed(payload, { timestamp: Math.floor(Date.now() / 1000) - 3600 }),
    )
    expect(old.json).toMatchObject({ status: 401, code: 'timestamp_out_of_window' })
    await nothingRecorded(event.id)
  })

  it('accepts any v1 entry, as while Stripe rolls the endpoint secret', async () => {
    const event = stripeEvent('customer.subscription.updated')
    const payload = JSON.stringify(event)
    const timestamp = Math.floor(Date.now() / 1000)
    const old = signed(payload, { secret: `whsec_${randomBytes(24).toString('hex')}`, timestamp })
    const current = signed(payload, { timestamp })
    const v1 = (header: string) => header.split(',').find((part) => part.startsWith('v1='))
    const both = `t=${timestamp},${v1(old['stripe-signature'])},${v1(current['stripe-signature'])}`
    const answer = await post(server.url, payload, { ...current, 'stripe-signature': both })
    expect(answer.json).toEqual({ status: 'applied', eventId: event.id })
    expect(await effectsOf(t.db, event.id)).toHaveLength(1)
  })

  it('refuses a request without a well-formed Stripe-Signature before reading its body', async () => {
    const event = stripeEvent()
    const headers = { 'content-type': 'application/json' }
    for (const signature of [undefined, 't=123', `v1=${'a'.repeat(64)}`, `t=abc,v1=${'a'.repeat(64)}`]) {
      const answer = await postUnfinished(
        server.url,
        signature === undefined ? headers : { ...headers, 'stripe-signature': signature },
        JSON.stringify(event).slice(0, 20),
      )
      expect(answer.status).toBe(401)
      expect(answer.headers.connection).toBe('close')
      expect(answer.json).toMatchObject({ code: 'missing_signature' })
    }
    await nothingRecorded(event.id)
  })

  it('answers 400 invalid_envelope, nothing recorded, for a signed body that is not a Stripe event', async () => {
    const payload = JSON.stringify({ object: 'event', type: 'invoice.paid' })
    const answer = await post(server.url, payload, signed(payload))
    expect(answer.status).toBe(400)
    expect(answer.json).toMatchObject({ code: 'invalid_envelope', errors: ['the event has no "id" (evt_…)'] })
  })
})

describe('stripeVerifier options', () => {
  it.each([
    ['', 'non-empty'],
    [[], 'signing secret'],
    ['sk_test_abc', 'Stripe API key'],
    ['rk_live_abc', 'Stripe API key'],
    ['not-a-webhook-secret', 'starts with whsec_'],
    [`${secret}\n`, 'whitespace'],
  ])('refuses the secret %j at creation (%s)', (bad, message) => {
    const attempt = () => stripeVerifier(bad as string)
    expect(attempt).toThrow(OutboxError)
    expect(attempt).toThrow(message)
    try {
      attempt()
    } catch (error) {
      expect((error as OutboxError).code).toBe('ERR_OUTBOX_INVALID_SECRET')
      expect((error as Error).message).not.toContain('not-a-webhook-secret')
    }
  })

  it('refuses a tolerance that is not a positive number', () => {
    expect(() => stripeVerifier(secret, { toleranceSeconds: 0 })).toThrow(/toleranceSeconds/)
    expect(() => stripeVerifier(secret, { toleranceSeconds: Number.NaN })).toThrow(/toleranceSeconds/)
  })
})
