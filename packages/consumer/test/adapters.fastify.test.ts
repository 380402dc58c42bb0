import type { ReceivedEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboxWebhooks } from '../src/fastify.js'
import { createConsumer, type EnvelopeReader, OutboxError, type Refusal } from '../src/index.js'
import {
  countRows,
  createEffects,
  delivery,
  makeEvent,
  newSecret,
  quiet,
  recorded,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()

/** The FastifyRequest each request had in a root hook, and what the handler and onError got. */
const seen = { hookReq: [] as FastifyRequest[], handlerReq: [] as unknown[], errorReq: [] as unknown[] }
const refusals: Refusal[] = []
let app: FastifyInstance
let url: string

async function send(path: string, body: string, headers: Record<string, string>) {
  const res = await fetch(`${url}${path}`, { method: 'POST', body, headers })
  const text = await res.text()
  return { status: res.status, headers: res.headers, json: JSON.parse(text) }
}

beforeAll(async () => {
  await createEffects(t.db)
  const consumer = createConsumer({ db: t.db, secret, logger: quiet })
  app = Fastify()
  app.addHook('onRequest', async (request) => {
    seen.hookReq.push(request)
  })
  // Routes of the application on both sides of the plugin, with Fastify's default JSON parser.
  app.post('/before', async (request) => ({ body: request.body }))
  await app.register(outboxWebhooks, {
    consumer,
    path: '/hooks',
    handler: async (event, trx, request) => {
      seen.handlerReq.push(request)
      await writeEffect(trx, event)
    },
    onError: (refused, request) => {
      refusals.push(refused)
      seen.errorReq.push(request)
    },
  })
  app.post('/after', async (request) => ({ body: request.body }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  url = `http://127.0.0.1:${port}`
})

afterAll(async () => {
  app.server.closeAllConnections()
  await app.close()
})

describe('the Fastify plugin outboxWebhooks', () => {
  it('applies a signed event with the FastifyRequest as third argument; a redelivery is a duplicate', async () => {
    const event = makeEvent({ aggregateId: 'fastify-applied' })
    const { body, headers } = delivery(event, { secrets: secret })
    const first = await send('/hooks', body, headers)
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen.handlerReq).toHaveLength(1)
    expect(seen.handlerReq[0]).toBe(seen.hookReq.at(-1))
    expect((seen.handlerReq[0] as FastifyRequest).routeOptions.url).toBe('/hooks')

    const again = await send('/hooks', body, headers)
    expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it("leaves the application's JSON parser to its other routes (encapsulation)", async () => {
    for (const path of ['/before', '/after']) {
      const answer = await send(path, JSON.stringify({ order: 42 }), { 'content-type': 'application/json' })
      expect(answer.status, path).toBe(200)
      expect(answer.json, path).toEqual({ body: { order: 42 } })
    }
  })

  it('answers a request without a content type with the consumer’s own 415, not Fastify’s', async () => {
    const event = makeEvent({ aggregateId: 'fastify-no-type' })
    const { body, headers } = delivery(event, { secrets: secret })
    const { 'content-type': _dropped, ...untyped } = headers
    const answer = await send('/hooks', body, { ...untyped, 'content-type': '' })
    expect(answer.status).toBe(415)
    expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/)
    expect(answer.json).toMatchObject({ status: 415, code: 'unsupported_media_type' })
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })

  it('gives onError the FastifyRequest of a refused request', async () => {
    const event = makeEvent({ aggregateId: 'fastify-forged' })
    const { body, headers } = delivery(event, { secrets: newSecret() })
    const answer = await send('/hooks', body, headers)
    expect(answer.status).toBe(401)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    expect(refusals.at(-1)?.code).toBe('invalid_signature')
    expect(seen.errorReq.at(-1)).toBe(seen.hookReq.at(-1))
    expect(await countRows(t.db, 'effects')).toBe(1)
  })

  it('refuses to register without a consumer, naming the option', async () => {
    const other = Fastify()
    const registered = other.register(outboxWebhooks, { handler: async () => {} } as never).ready()
    await expect(registered).rejects.toBeInstanceOf(OutboxError)
    await expect(registered).rejects.toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'consumer' })
    await other.close()
  })
})

/**
 * Type-checked only (`pnpm typecheck`): a consumer with its own envelope registers too, its handler annotating the
 * event as the `ReceivedEvent` it really gets.
 */
export async function registersAReceivedEnvelopeConsumer(envelope: EnvelopeReader): Promise<void> {
  const consumer = createConsumer({ db: t.db, allowUnsigned: true, envelope })
  await Fastify().register(outboxWebhooks, {
    consumer,
    handler: async (event: ReceivedEvent, _trx, request) => {
      request.log.info({ eventId: event.eventId, aggregateId: event.aggregateId }, 'received')
    },
  })
}
