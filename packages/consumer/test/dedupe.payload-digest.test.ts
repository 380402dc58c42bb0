import { randomBytes, randomUUID } from 'node:crypto'
import { sign } from '@octokit/webhooks-methods'
import { useTestDatabase } from '@outbox/test-harness'
import { Registry } from 'prom-client'
import Stripe from 'stripe'
import { Webhook } from 'svix'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type Consumer,
  consumerMetrics,
  createConsumer,
  githubEnvelope,
  githubVerifier,
  type ReceiptEventMap,
  standardWebhooksEnvelope,
  stripeEnvelope,
  stripeVerifier,
  svixVerifier,
} from '../src/index.js'
import { createReceivedEffects, effectsOf, processedRows, serve, writeReceived } from './sender-support.js'
import {
  createEffects,
  delivery,
  makeEvent,
  newSecret,
  post,
  recorded,
  recordingLogger,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const closers: (() => Promise<void>)[] = []
const register = new Registry()

beforeAll(async () => {
  await createEffects(t.db)
  await createReceivedEffects(t.db)
})
afterAll(async () => {
  for (const close of closers.splice(0)) await close()
})

/** A consumer on a node server, with its duplicates, warn lines and the mismatch metric observed. */
async function observed(consumer: Consumer<any, any, any>, handler: (event: any, trx: any) => Promise<void>) {
  const duplicates: ReceiptEventMap['receipt:duplicate'][] = []
  consumer.on('receipt:duplicate', (receipt) => duplicates.push(receipt))
  await consumerMetrics(consumer, { register })
  const server = await serve(consumer.node(handler))
  closers.push(server.close)
  return { url: server.url, duplicates }
}

async function mismatches(source: string): Promise<number> {
  const metric = await register.getSingleMetric('outbox_consumer_payload_mismatches_total')?.get()
  return metric?.values.find((value) => value.labels.source === source)?.value ?? 0
}

const mismatchWarnings = (logger: ReturnType<typeof recordingLogger>) =>
  logger.lines.filter((line) => line.level === 'warn' && line.msg.includes('another payload'))

describe('a repeated id with another payload is reported, a real retry is not', () => {
  it("this project's relay: a retry (its id in another case) is a plain duplicate; another payload is a mismatch", async () => {
    const secret = newSecret()
    const logger = recordingLogger()
    const consumer = createConsumer({ db: t.db, secret, logger, source: 'relay' })
    const { url, duplicates } = await observed(consumer, (event, trx) => writeEffect(trx, event))
    const event = makeEvent({ aggregateId: 'digest-relay' })
    const first = delivery(event, { secrets: secret })
    expect((await post(url, first.body, first.headers)).json.status).toBe('applied')

    // The relay's retry: the same event, its id written in upper case (the envelope accepts either).
    const upper = { ...event, eventId: event.eventId.toUpperCase() }
    const retry = delivery(upper, { secrets: secret })
    expect((await post(url, retry.body, retry.headers)).json.status).toBe('duplicate_ignored')
    expect(duplicates.map((receipt) => receipt.payloadMismatch)).toEqual([false])
    expect(mismatchWarnings(logger)).toEqual([])

    const other = delivery({ ...event, data: { status: 'refunded' } }, { secrets: secret })
    expect((await post(url, other.body, other.headers)).json.status).toBe('duplicate_ignored')
    expect(duplicates.map((receipt) => receipt.payloadMismatch)).toEqual([false, true])
    expect(mismatchWarnings(logger)).toHaveLength(1)
    expect(mismatchWarnings(logger)[0]?.meta).toMatchObject({ eventId: event.eventId, source: 'relay' })
    expect(await mismatches('relay')).toBe(1)
    expect(await recorded(t.db, event)).toMatchObject({ processed: 1, effects: 1 }) // applied once: the first
  })

  it('Svix: a retry (new timestamp, new signature) is a plain duplicate; another payload is a mismatch', async () => {
    const secret = newSecret()
    const logger = recordingLogger()
    const consumer = createConsumer({
      db: t.db,
      verify: svixVerifier(secret),
      envelope: standardWebhooksEnvelope,
      source: 'svix-digest',
      logger,
    })
    const { url, duplicates } = await observed(consumer, (event, trx) => writeReceived(trx, event))
    const id = `msg_${randomBytes(10).toString('hex')}`
    const signed = (payload: string, at: Date) => ({
      'content-type': 'application/json',
      'svix-id': id,
      'svix-timestamp': String(Math.floor(at.getTime() / 1000)),
      'svix-signature': new Webhook(secret).sign(id, at, payload),
    })
    const payload = JSON.stringify({
      type: 'user.created',
      timestamp: new Date().toISOString(),
      data: { id: 'u1' },
    })
    expect((await post(url, payload, signed(payload, new Date()))).json.status).toBe('applied')
    const later = new Date(Date.now() + 30_000)
    expect((await post(url, payload, signed(payload, later))).json.status).toBe('duplicate_ignored')
    const changed = payload.replace('"u1"', '"u2"')
    expect((await post(url, changed, signed(changed, later))).json.status).toBe('duplicate_ignored')
    expect(duplicates.map((receipt) => receipt.payloadMismatch)).toEqual([false, true])
    expect(mismatchWarnings(logger)).toHaveLength(1)
    expect(await mismatches('svix-digest')).toBe(1)
    expect(await effectsOf(t.db, id)).toEqual([expect.objectContaining({ data: { id: 'u1' } })])
  })

  it('Stripe: a retry (pending_webhooks changed, another layout) is a plain duplicate; another object is a mismatch', async () => {
    const secret = `whsec_${randomBytes(24).toString('hex')}`
    const logger = recordingLogger()
    const consumer = createConsumer({
      db: t.db,
      verify: stripeVerifier(secret),
      envelope: stripeEnvelope,
      source: 'stripe-digest',
      logger,
    })
    const { url, duplicates } = await observed(consumer, (event, trx) => writeReceived(trx, event))
    const headers = (payload: string) => ({
      'content-type': 'application/json; charset=utf-8',
      'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret }),
    })
    const event = {
      id: `evt_${randomBytes(12).toString('hex')}`,
      object: 'event',
      created: Math.floor(Date.now() / 1000) - 5,
      type: 'invoice.paid',
      livemode: false,
      pending_webhooks: 2,
      data: { object: { id: 'in_1', object: 'invoice', amount_paid: 1200 } },
    }
    const first = JSON.stringify(event, null, 2)
    expect((await post(url, first, headers(first))).json.status).toBe('applied')
    const retry = JSON.stringify({ ...event, pending_webhooks: 1 })
    expect((await post(url, retry, headers(retry))).json.status).toBe('duplicate_ignored')
    const other = JSON.stringify({ ...event, data: { object: { ...event.data.object, amount_paid: 1 } } })
    expect((await post(url, other, headers(other))).json.status).toBe('duplicate_ignored')
    expect(duplicates.map((receipt) => receipt.payloadMismatch)).toEqual([false, true])
    expect(mismatchWarnings(logger)).toHaveLength(1)
    expect(await mismatches('stripe-digest')).toBe(1)
  })

  it('GitHub: a redelivery (same delivery id, same body) is a plain duplicate; another body is a mismatch', async () => {
    const secret = randomBytes(20).toString('hex')
    const logger = recordingLogger()
    const consumer = createConsumer({
      db: t.db,
      verify: githubVerifier(secret),
      envelope: githubEnvelope,
      source: 'github-digest',
      logger,
    })
    const { url, duplicates } = await observed(consumer, (event, trx) => writeReceived(trx, event))
    const id = randomUUID()
    const headers = async (payload: string) => ({
      'content-type': 'application/json',
      'x-github-event': 'issues',
      'x-github-delivery': id,
      'x-hub-signature-256': await sign(secret, payload),
    })
    const body = { action: 'opened', issue: { number: 7, title: 'twice' }, repository: { full_name: 'o/r' } }
    const payload = JSON.stringify(body)
    expect((await post(url, payload, await headers(payload))).json.status).toBe('applied')
    expect((await post(url, payload, await headers(payload))).json.status).toBe('duplicate_ignored')
    const edited = JSON.stringify({ ...body, issue: { number: 7, title: 'three times' } })
    expect((await post(url, edited, await headers(edited))).json.status).toBe('duplicate_ignored')
    expect(duplicates.map((receipt) => receipt.payloadMismatch)).toEqual([false, true])
    expect(mismatchWarnings(logger)).toHaveLength(1)
    expect(await mismatches('github-digest')).toBe(1)
    expect(await processedRows(t.db, 'github-digest', id)).toEqual([
      expect.objectContaining({ payload_digest: expect.stringMatching(/^[0-9a-f]{64}$/) }),
    ])
  })
})
