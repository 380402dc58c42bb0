import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { useTestDatabase } from '@outbox/test-harness'
import { Hono } from 'hono'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type Refusal } from '../src/index.js'
import {
  createEffects,
  delivery,
  makeEvent,
  newSecret,
  post,
  quiet,
  recorded,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()

/** What the Hono route handed the consumer, and what the handler and onError got back. */
const seen = { routeReq: [] as Request[], handlerReq: [] as unknown[], errorReq: [] as unknown[] }
const refusals: Refusal[] = []
let server: Server
let url: string

beforeAll(async () => {
  await createEffects(t.db)
  const consumer = createConsumer({ db: t.db, secret, logger: quiet })
  const hooks = consumer.fetch(
    async (event, trx, req) => {
      seen.handlerReq.push(req)
      await writeEffect(trx, event)
    },
    {
      onError: (refused, req) => {
        refusals.push(refused)
        seen.errorReq.push(req)
      },
    },
  )
  const app = new Hono()
  app.post('/hooks', (c) => {
    seen.routeReq.push(c.req.raw)
    return hooks(c.req.raw)
  })
  // A mounting mistake: a middleware (a validator, a logger) read the body before the consumer.
  app.post('/read-first/hooks', async (c) => {
    seen.routeReq.push(c.req.raw)
    await c.req.json()
    return hooks(c.req.raw)
  })
  server = await new Promise<Server>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () =>
      resolve(started as Server),
    )
  })
  const { port } = server.address() as { port: number }
  url = `http://127.0.0.1:${port}`
})

afterAll(async () => {
  await new Promise<void>((resolve, reject) => {
    server.closeAllConnections()
    server.close((error) => (error ? reject(error) : resolve()))
  })
})

describe('consumer.fetch mounted in Hono on Node (@hono/node-server)', () => {
  it('applies a signed event, then answers its redelivery duplicate_ignored', async () => {
    const event = makeEvent({ aggregateId: 'hono-applied' })
    const { body, headers } = delivery(event, { secrets: secret })
    const first = await post(url, body, headers)
    expect(first.status).toBe(200)
    expect(first.headers['content-type']).toBe('application/json')
    expect(first.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })

    const again = await post(url, body, headers)
    expect(again.status).toBe(200)
    expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('gives the handler the web Request Hono routed, as its third argument', async () => {
    const before = seen.handlerReq.length
    const event = makeEvent({ aggregateId: 'hono-request' })
    const { body, headers } = delivery(event, { secrets: secret })
    expect((await post(url, body, headers)).status).toBe(200)
    const req = seen.handlerReq[before]
    expect(req).toBeInstanceOf(Request)
    expect(req).toBe(seen.routeReq.at(-1))
    expect((req as Request).headers.get('x-idempotency-key')).toBe(event.eventId)
  })

  it('answers 401 to a bad signature, records nothing, and gives onError the web Request', async () => {
    const event = makeEvent({ aggregateId: 'hono-forged' })
    const { body, headers } = delivery(event, { secrets: newSecret() })
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(401)
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
    expect(refusals.at(-1)?.code).toBe('invalid_signature')
    expect(seen.errorReq.at(-1)).toBeInstanceOf(Request)
    expect(seen.errorReq.at(-1)).toBe(seen.routeReq.at(-1))
  })

  it('answers 500 body_already_parsed when a middleware read the body first', async () => {
    const event = makeEvent({ aggregateId: 'hono-read-first' })
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await post(`${url}/read-first`, body, headers)
    expect(answer.status).toBe(500)
    expect(answer.json).toMatchObject({ status: 500, code: 'body_already_parsed' })
    expect(refusals.at(-1)?.code).toBe('body_already_parsed')
    expect(seen.errorReq.at(-1)).toBe(seen.routeReq.at(-1))
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })
})
