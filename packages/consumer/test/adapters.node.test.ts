import { createServer, IncomingMessage, type Server } from 'node:http'
import { connect } from 'node:net'
import { useTestDatabase } from '@outbox/test-harness'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type Refusal } from '../src/index.js'
import { requestHead } from './servers.js'
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

/** What the server handed the consumer, and what the handler and onError got back. */
const seen = { serverReq: [] as IncomingMessage[], handlerReq: [] as unknown[], errorReq: [] as unknown[] }
const refusals: Refusal[] = []
let server: Server
let url: string

beforeAll(async () => {
  await createEffects(t.db)
  const consumer = createConsumer({ db: t.db, secret, logger: quiet })
  const hooks = consumer.node(
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
  server = createServer((req, res) => {
    seen.serverReq.push(req)
    if (req.url === '/read-first/hooks') {
      // A mounting mistake: something (a logging or parsing middleware) read the whole body first.
      req.resume()
      req.on('end', () => hooks(req, res))
      return
    }
    hooks(req, res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  url = `http://127.0.0.1:${port}`
})

afterAll(async () => {
  await new Promise<void>((resolve, reject) => {
    server.closeAllConnections()
    server.close((error) => (error ? reject(error) : resolve()))
  })
})

describe('consumer.node on http.createServer', () => {
  it('applies a signed event and gives the handler the IncomingMessage; a redelivery is a duplicate', async () => {
    const event = makeEvent({ aggregateId: 'node-applied' })
    const { body, headers } = delivery(event, { secrets: secret })
    const first = await post(url, body, headers)
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen.handlerReq).toHaveLength(1)
    expect(seen.handlerReq[0]).toBeInstanceOf(IncomingMessage)
    expect(seen.handlerReq[0]).toBe(seen.serverReq.at(-1))

    const again = await post(url, body, headers)
    expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('gives onError the IncomingMessage of a refused request', async () => {
    const event = makeEvent({ aggregateId: 'node-forged' })
    const { body, headers } = delivery(event, { secrets: newSecret() })
    const answer = await post(url, body, headers)
    expect(answer.status).toBe(401)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    expect(refusals.at(-1)?.code).toBe('invalid_signature')
    expect(seen.errorReq.at(-1)).toBe(seen.serverReq.at(-1))
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })

  it('answers 500 body_already_parsed, not a hang, when something read the body before it', async () => {
    const event = makeEvent({ aggregateId: 'node-read-first' })
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await post(`${url}/read-first`, body, headers)
    expect(answer.status).toBe(500)
    expect(answer.json).toMatchObject({ status: 500, code: 'body_already_parsed' })
    expect(refusals.at(-1)?.code).toBe('body_already_parsed')
    expect(seen.errorReq.at(-1)).toBe(seen.serverReq.at(-1))
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })

  it('settles a request whose client left before the consumer read it, instead of waiting forever', async () => {
    let settle = () => {}
    const settled = new Promise<void>((resolve) => {
      settle = resolve
    })
    const logger = {
      ...quiet,
      debug: (_meta: unknown, message: string) => message.includes('aborted') && settle(),
    }
    const hooks = createConsumer({ db: t.db, secret, logger }).node(async () => {})
    // A slow middleware in front: the consumer only gets the request once its client is gone.
    const late = createServer((req, res) => req.once('close', () => hooks(req, res)))
    await new Promise<void>((resolve) => late.listen(0, '127.0.0.1', resolve))
    const { port } = late.address() as { port: number }
    const { body, headers } = delivery(makeEvent(), { secrets: secret })
    const socket = connect({ port, host: '127.0.0.1' })
    socket.write(requestHead({ ...headers, 'content-length': String(body.length) }))
    socket.end(body.slice(0, 10), () => socket.destroy())
    // Resolved by the consumer's "aborted by the client" log line; a consumer still waiting never gets there.
    await settled
    late.closeAllConnections()
    await new Promise<void>((resolve) => late.close(() => resolve()))
  })
})
