import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import express4 from 'express4'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type ExpressMiddleware, type Refusal } from '../src/index.js'
import {
  countRows,
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

beforeAll(async () => {
  await createEffects(t.db)
})

/** What the tests use of an Express 4 or 5 app (their own types differ too much to share a union). */
type App = ((req: IncomingMessage, res: ServerResponse) => void) & {
  use(...handlers: unknown[]): unknown
  post(path: string, ...handlers: unknown[]): unknown
}

/** Express 5 and Express 4 as an application builds them: a JSON or raw parser may sit in front of the hooks. */
const EXPRESS: Record<
  string,
  { app: () => App; json: () => unknown; raw: () => unknown; urlencoded: () => unknown }
> = {
  'Express 5': {
    app: () => express() as unknown as App,
    json: () => express.json(),
    raw: () => express.raw({ type: 'application/json' }),
    urlencoded: () => express.urlencoded({ extended: false }),
  },
  'Express 4': {
    app: () => express4() as unknown as App,
    json: () => express4.json(),
    raw: () => express4.raw({ type: 'application/json' }),
    urlencoded: () => express4.urlencoded({ extended: false }),
  },
}

type Parser = 'none' | 'raw' | 'json' | 'urlencoded'

let closeServer: (() => Promise<void>) | undefined
afterEach(async () => {
  await closeServer?.()
  closeServer = undefined
})

describe.each(Object.keys(EXPRESS))('consumer.dedupe under %s', (version) => {
  const framework = EXPRESS[version]!

  async function serve(parser: Parser) {
    const seen: { handlerReq: unknown[]; errorReq: unknown[]; routeReq: unknown[]; refusals: Refusal[] } = {
      handlerReq: [],
      errorReq: [],
      routeReq: [],
      refusals: [],
    }
    const consumer = createConsumer({ db: t.db, secret, logger: quiet })
    const dedupe: ExpressMiddleware = consumer.dedupe(
      async (event, trx, req) => {
        seen.handlerReq.push(req)
        await writeEffect(trx, event)
      },
      {
        onError: (refused, req) => {
          seen.refusals.push(refused)
          seen.errorReq.push(req)
        },
      },
    )
    const app = framework.app()
    // Remembers the request object Express hands the route, to compare with what the consumer passes on.
    const remember = (req: IncomingMessage, _res: unknown, next: () => void) => {
      seen.routeReq.push(req)
      next()
    }
    const chain = [remember, ...(parser === 'raw' ? [framework.raw()] : []), dedupe]
    if (parser === 'json') app.use(framework.json())
    if (parser === 'urlencoded') app.use(framework.urlencoded())
    app.post('/hooks', ...chain)
    const server = createServer(app)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as { port: number }
    closeServer = () =>
      new Promise((resolve, reject) => {
        server.closeAllConnections()
        server.close((error) => (error ? reject(error) : resolve()))
      })
    return { url: `http://127.0.0.1:${port}`, seen }
  }

  it('applies a signed event once, records it, and gives the handler the Express request', async () => {
    const { url, seen } = await serve('none')
    const event = makeEvent({ aggregateId: `${version}-applied` })
    const { body, headers } = delivery(event, { secrets: secret })
    const first = await post(url, body, headers)
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen.handlerReq).toHaveLength(1)
    expect(seen.handlerReq[0]).toBe(seen.routeReq[0])
    // Express's own request: its prototype carries Express's helpers, not just IncomingMessage's.
    expect(typeof (seen.handlerReq[0] as { get?: unknown }).get).toBe('function')

    const again = await post(url, body, headers)
    expect(again.status).toBe(200)
    expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen.handlerReq).toHaveLength(1)
  })

  it("takes the Buffer that express.raw({ type: 'application/json' }) left as the raw bytes", async () => {
    const { url, seen } = await serve('raw')
    const event = makeEvent({ aggregateId: `${version}-raw` })
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(200)
    expect(answer.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(Buffer.isBuffer((seen.handlerReq[0] as { body?: unknown }).body)).toBe(true)
  })

  it('reads the stream itself behind a parser that skips JSON (app-wide express.urlencoded())', async () => {
    // Express 4's parsers leave `req.body = {}` on a request they skip: that placeholder is not a parsed body.
    const { url } = await serve('urlencoded')
    const event = makeEvent({ aggregateId: `${version}-urlencoded` })
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(200)
    expect(answer.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('answers 500 body_already_parsed behind express.json(), records nothing, and says how to mount it', async () => {
    const { url, seen } = await serve('json')
    const event = makeEvent({ aggregateId: `${version}-json` })
    const { body, headers } = delivery(event, { secrets: secret })
    const before = await countRows(t.db, 'processed_events')
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(500)
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(answer.json).toMatchObject({ status: 500, code: 'body_already_parsed' })
    expect(answer.json.detail).toMatch(/express\.raw\(\{ type: 'application\/json' \}\)/)
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
    expect(await countRows(t.db, 'processed_events')).toBe(before)
    expect(seen.handlerReq).toHaveLength(0)
    // onError hears the mounting mistake with the Express request that carried it.
    expect(seen.refusals.map((refused) => refused.code)).toEqual(['body_already_parsed'])
    expect(seen.errorReq[0]).toBe(seen.routeReq[0])
  })

  it("passes the Express request to the adapter's onError on a refusal", async () => {
    const { url, seen } = await serve('none')
    const event = makeEvent({ aggregateId: `${version}-forged` })
    const { body, headers } = delivery(event, { secrets: newSecret() })
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(401)
    expect(seen.refusals.map((refused) => refused.code)).toEqual(['invalid_signature'])
    expect(seen.errorReq).toHaveLength(1)
    expect(seen.errorReq[0]).toBe(seen.routeReq[0])
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })
})
