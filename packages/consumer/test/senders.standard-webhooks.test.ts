import { randomBytes } from 'node:crypto'
import { parseSigningSecrets } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import { Webhook } from 'svix'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  createConsumer,
  type EnvelopeReader,
  OutboxError,
  standardWebhooksEnvelope,
  standardWebhooksVerifier,
  svixVerifier,
  type WebhookVerifier,
} from '../src/index.js'
import {
  createReceivedEffects,
  effectsOf,
  postUnfinished,
  processedRows,
  serve,
  writeReceived,
} from './sender-support.js'
import { newSecret, post, quiet } from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const servers: { url: string; close: () => Promise<void> }[] = []
let svixUrl: string
let calls = 0

/** A consumer of `source` on its own server; its handler counts and records each applied event. */
async function start(options: { verify: WebhookVerifier; envelope: EnvelopeReader; source: string }) {
  const consumer = createConsumer({ db: t.db, logger: quiet, ...options })
  const server = await serve(
    consumer.node(async (event, trx) => {
      calls++
      await writeReceived(trx, event)
    }),
  )
  servers.push(server)
  return server.url
}

beforeAll(async () => {
  await createReceivedEffects(t.db)
  svixUrl = await start({ verify: svixVerifier(secret), envelope: standardWebhooksEnvelope, source: 'svix' })
})

afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()))
})

const newMessageId = () => `msg_${randomBytes(12).toString('hex')}`

/** A body in the shape Standard Webhooks recommends. */
function userCreated() {
  return {
    type: 'user.created',
    timestamp: '2026-12-04T09:30:00.000Z',
    data: { id: `user_${randomBytes(6).toString('hex')}`, email: 'ada@example.com' },
  }
}

/**
 * The headers of one delivery attempt, signed by the public `svix` package's Webhook class. Svix names them
 * `svix-*`; white-labelled accounts and other Standard Webhooks senders use `webhook-*`.
 */
function signed(
  id: string,
  payload: string,
  options: { names?: 'svix' | 'webhook'; secret?: string; at?: Date } = {},
): Record<string, string> {
  const at = options.at ?? new Date()
  const prefix = options.names ?? 'svix'
  return {
    'content-type': 'application/json',
    [`${prefix}-id`]: id,
    [`${prefix}-timestamp`]: String(Math.floor(at.getTime() / 1000)),
    [`${prefix}-signature`]: new Webhook(options.secret ?? secret).sign(id, at, payload),
  }
}

async function nothingRecorded(source: string, id: string) {
  expect(await processedRows(t.db, source, id)).toEqual([])
  expect(await effectsOf(t.db, id)).toEqual([])
}

describe('Svix / Standard Webhooks: svixVerifier + standardWebhooksEnvelope under sequence off', () => {
  it('applies a message signed by the svix package once; its retry is duplicate_ignored', async () => {
    const body = userCreated()
    const payload = JSON.stringify(body)
    const id = newMessageId()
    const before = calls

    const first = await post(svixUrl, payload, signed(id, payload))
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: id })
    expect(await effectsOf(t.db, id)).toEqual([
      { type: 'user.created', data: body.data, occurred_at: '2026-12-04T09:30:00.000Z' },
    ])
    expect(await processedRows(t.db, 'svix', id)).toMatchObject([
      { source: 'svix', event_id: id, type: 'user.created', aggregate_type: null, sequence: null },
    ])

    // A retry carries the same message id, signed again with a later timestamp.
    const retry = await post(svixUrl, payload, signed(id, payload, { at: new Date(Date.now() + 30_000) }))
    expect(retry.status).toBe(200)
    expect(retry.json).toEqual({ status: 'duplicate_ignored', eventId: id })
    expect(calls).toBe(before + 1)
    expect(await effectsOf(t.db, id)).toHaveLength(1)
  })

  it('accepts the standard webhook-* names too (white-labelled Svix, other senders)', async () => {
    const payload = JSON.stringify(userCreated())
    const id = newMessageId()
    const answer = await post(svixUrl, payload, signed(id, payload, { names: 'webhook' }))
    expect(answer.json).toEqual({ status: 'applied', eventId: id })
    expect(await processedRows(t.db, 'svix', id)).toHaveLength(1)
  })

  it('standardWebhooksVerifier alone takes a webhook-* message signed by svix', async () => {
    const url = await start({
      verify: standardWebhooksVerifier(parseSigningSecrets(secret)),
      envelope: standardWebhooksEnvelope,
      source: 'standard-webhooks',
    })
    const payload = JSON.stringify(userCreated())
    const id = newMessageId()
    const answer = await post(url, payload, signed(id, payload, { names: 'webhook' }))
    expect(answer.json).toEqual({ status: 'applied', eventId: id })
    expect(await processedRows(t.db, 'standard-webhooks', id)).toHaveLength(1)
  })

  it('refuses a tampered body with 401 invalid_signature and records nothing', async () => {
    const payload = JSON.stringify(userCreated())
    const id = newMessageId()
    const tampered = payload.replace('ada@', 'eve@')
    expect(tampered).not.toBe(payload)
    const answer = await post(svixUrl, tampered, signed(id, payload))
    expect(answer.status).toBe(401)
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    await nothingRecorded('svix', id)
  })

  it('refuses another secret, an expired timestamp, and a mix of the two header families', async () => {
    const payload = JSON.stringify(userCreated())
    const id = newMessageId()
    const other = await post(svixUrl, payload, signed(id, payload, { secret: newSecret() }))
    expect(other.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    const old = await post(svixUrl, payload, signed(id, payload, { at: new Date(Date.now() - 3_600_000) }))
    expect(old.json).toMatchObject({ status: 401, code: 'timestamp_out_of_window' })
    // webhook-id with svix-timestamp and svix-signature: not one sender's set of headers.
    const { 'svix-id': _id, ...rest } = signed(id, payload)
    const mixed = await post(svixUrl, payload, { ...rest, 'webhook-id': id })
    expect(mixed.json).toMatchObject({ status: 401, code: 'missing_signature' })
    await nothingRecorded('svix', id)
  })

  it('refuses a request without the signature headers before reading its body', async () => {
    const payload = JSON.stringify(userCreated())
    const id = newMessageId()
    const complete = signed(id, payload)
    const { 'svix-signature': _signature, ...unsigned } = complete
    const { 'svix-timestamp': _timestamp, ...undated } = complete
    for (const headers of [{ 'content-type': 'application/json' }, unsigned, undated]) {
      const answer = await postUnfinished(svixUrl, headers, payload.slice(0, 10))
      expect(answer.status).toBe(401)
      expect(answer.headers.connection).toBe('close')
      expect(answer.json).toMatchObject({ code: 'missing_signature' })
    }
    await nothingRecorded('svix', id)
  })

  it('answers 400 invalid_envelope, nothing recorded, for a signed body without a type', async () => {
    const payload = JSON.stringify({ data: { id: 'user_1' } })
    const id = newMessageId()
    const before = calls
    const answer = await post(svixUrl, payload, signed(id, payload))
    expect(answer.status).toBe(400)
    expect(answer.json).toMatchObject({ code: 'invalid_envelope' })
    expect(answer.json.errors[0]).toContain('"type"')
    expect(calls).toBe(before)
    await nothingRecorded('svix', id)
  })

  it('reads a body of another shape through a wrapper, the id still from the signed header', async () => {
    const wrapped: EnvelopeReader = (body, headers) => {
      const { event, payload } = body as { event?: unknown; payload?: unknown }
      return standardWebhooksEnvelope({ type: event, data: payload }, headers)
    }
    const url = await start({ verify: svixVerifier(secret), envelope: wrapped, source: 'svix-wrapped' })
    const body = { event: 'invoice.finalized', payload: { invoice: 'in_1' } }
    const payload = JSON.stringify(body)
    const id = newMessageId()
    const answer = await post(url, payload, signed(id, payload))
    expect(answer.json).toEqual({ status: 'applied', eventId: id })
    expect(await effectsOf(t.db, id)).toEqual([
      { type: 'invoice.finalized', data: { invoice: 'in_1' }, occurred_at: null },
    ])
  })
})

describe('svixVerifier options', () => {
  it('refuses a secret that is not whsec_ + base64, naming itself and not the secret', () => {
    const attempt = () => svixVerifier('whsec_short')
    expect(attempt).toThrow(OutboxError)
    try {
      attempt()
    } catch (error) {
      expect((error as OutboxError).code).toBe('ERR_OUTBOX_INVALID_SECRET')
      expect((error as Error).message).toMatch(/^svixVerifier: /)
    }
  })

  it('refuses a tolerance that is not a positive number', () => {
    expect(() => svixVerifier(secret, { toleranceSeconds: -1 })).toThrow(/toleranceSeconds/)
  })
})
