import { Agent, request as httpRequest } from 'node:http'
import { useTestDatabase } from '@outbox/test-harness'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type Refusal } from '../src/index.js'
import { ADAPTERS, type AdapterName, type Running, requestHead, sendPartial, startServer } from './servers.js'
import {
  countRows,
  createEffects,
  delivery,
  makeEvent,
  newSecret,
  post,
  quiet,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const MAX_BODY_BYTES = 4096

beforeAll(async () => {
  await createEffects(t.db)
})

let running: Running | undefined
afterEach(async () => {
  await running?.close()
  running = undefined
  // Each test starts from empty tables, so "nothing recorded" is a count of zero.
  for (const table of ['processed_events', 'consumer_cursors', 'effects'])
    await t.db.deleteFrom(table).execute()
})

async function start(adapter: AdapterName) {
  const refusals: Refusal[] = []
  let calls = 0
  const consumer = createConsumer({ db: t.db, secret, logger: quiet, maxBodyBytes: MAX_BODY_BYTES })
  running = await startServer(adapter, consumer, {
    handler: async (event, trx) => {
      calls++
      await writeEffect(trx, event)
    },
    onError: (refused) => refusals.push(refused),
  })
  return { server: running, refusals, calls: () => calls }
}

async function expectNothingRecorded(): Promise<void> {
  expect(await countRows(t.db, 'processed_events')).toBe(0)
  expect(await countRows(t.db, 'effects')).toBe(0)
}

/** The JSON body of a raw HTTP/1.1 response (Content-Length framed; every answer of the consumer is). */
function bodyOf(response: string): any {
  const at = response.indexOf('\r\n\r\n')
  return JSON.parse(response.slice(at + 4))
}

describe.each(ADAPTERS)('the core behind the %s adapter, on the network', (adapter) => {
  it('answers 405 with Allow: POST to another method, and records nothing', async () => {
    const { server, refusals, calls } = await start(adapter)
    const answer = await new Promise<{ status: number; allow: string | undefined; body: any }>(
      (resolve, reject) => {
        const req = httpRequest(`${server.url}/hooks`, { method: 'GET', agent: false }, (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => {
            text += chunk
          })
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, allow: res.headers.allow, body: JSON.parse(text) }),
          )
        })
        req.on('error', reject)
        req.end()
      },
    )
    expect(answer.status).toBe(405)
    expect(answer.allow).toBe('POST')
    expect(answer.body).toMatchObject({ status: 405, code: 'method_not_allowed' })
    expect(refusals.map((refused) => refused.code)).toEqual(['method_not_allowed'])
    expect(calls()).toBe(0)
    await expectNothingRecorded()
  })

  it('keeps the connection open after a delivery it read in full: the next one reuses it', async () => {
    const { server, calls } = await start(adapter)
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    try {
      const reused: boolean[] = []
      for (const sequence of [1, 2]) {
        const event = makeEvent({ aggregateId: `${adapter}-keep-alive`, sequence })
        const { body, headers } = delivery(event, { secrets: secret })
        const answer = await new Promise<{ status: number; connection: string | undefined }>(
          (resolve, reject) => {
            const req = httpRequest(`${server.url}/hooks`, { method: 'POST', headers, agent }, (res) => {
              res.resume()
              res.on('end', () =>
                resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }),
              )
            })
            req.on('error', reject)
            req.end(body, () => reused.push(req.reusedSocket))
          },
        )
        expect(answer.status).toBe(200)
        expect(answer.connection).not.toBe('close')
      }
      expect(reused).toEqual([false, true])
      expect(calls()).toBe(2)
    } finally {
      agent.destroy()
    }
  })

  it('answers an empty or malformed content type with its own 415 problem document', async () => {
    const { server, refusals, calls } = await start(adapter)
    for (const contentType of ['', 'json']) {
      const { body, headers } = delivery(makeEvent(), { secrets: secret })
      const answer = await post(server.url, body, { ...headers, 'content-type': contentType })
      expect(answer.status, contentType).toBe(415)
      expect(answer.headers['content-type'], contentType).toMatch(/^application\/problem\+json/)
      expect(answer.json, contentType).toMatchObject({ status: 415, code: 'unsupported_media_type' })
    }
    expect(refusals.map((refused) => refused.code)).toEqual([
      'unsupported_media_type',
      'unsupported_media_type',
    ])
    expect(calls()).toBe(0)
    await expectNothingRecorded()
  })

  it('refuses missing signature headers with 401 before reading the body, and closes the connection', async () => {
    const { server, refusals, calls } = await start(adapter)
    const { body, headers } = delivery(makeEvent()) // not signed
    // Announces far more than it sends: a server that read the body first would wait for the rest forever.
    const head = requestHead({ ...headers, 'content-length': String(MAX_BODY_BYTES) })
    const exchange = await sendPartial(server.port, head, body.slice(0, 10))
    expect(exchange.status).toBe(401)
    expect(exchange.response.toLowerCase()).toContain('connection: close')
    expect(bodyOf(exchange.response)).toMatchObject({ status: 401, code: 'missing_signature' })
    expect(['end', 'reset']).toContain(exchange.ended)
    expect(refusals.map((refused) => refused.code)).toEqual(['missing_signature'])
    expect(calls()).toBe(0)
    await expectNothingRecorded()
  })

  it('refuses malformed signature headers the same way', async () => {
    const { server, calls } = await start(adapter)
    const event = makeEvent()
    const { body, headers } = delivery(event, { secrets: secret })
    const head = requestHead({
      ...headers,
      'webhook-signature': 'not-a-signature',
      'content-length': String(MAX_BODY_BYTES),
    })
    const exchange = await sendPartial(server.port, head, body.slice(0, 10))
    expect(exchange.status).toBe(401)
    expect(bodyOf(exchange.response)).toMatchObject({ status: 401, code: 'missing_signature' })
    expect(['end', 'reset']).toContain(exchange.ended)
    expect(calls()).toBe(0)
    await expectNothingRecorded()
  })

  it('answers 413 to an announced Content-Length over the limit without reading it, and closes', async () => {
    const { server, refusals } = await start(adapter)
    const { body, headers } = delivery(makeEvent(), { secrets: secret })
    const head = requestHead({ ...headers, 'content-length': String(MAX_BODY_BYTES * 100) })
    const exchange = await sendPartial(server.port, head, body)
    expect(exchange.status).toBe(413)
    expect(bodyOf(exchange.response)).toMatchObject({ status: 413, limitBytes: MAX_BODY_BYTES })
    expect(['end', 'reset']).toContain(exchange.ended)
    expect(refusals.map((refused) => refused.code)).toEqual(['payload_too_large'])
    await expectNothingRecorded()
  })

  it('answers 413 the moment a chunked body passes the limit, and closes without reading on', async () => {
    const { server, refusals } = await start(adapter)
    const { headers } = delivery(makeEvent(), { secrets: secret })
    const head = requestHead({ ...headers, 'transfer-encoding': 'chunked' })
    // Two chunks past the limit and no terminating chunk: the sender would go on.
    const chunk = 'x'.repeat(MAX_BODY_BYTES)
    const framed = `${chunk.length.toString(16)}\r\n${chunk}\r\n`.repeat(2)
    const exchange = await sendPartial(server.port, head, framed)
    expect(exchange.status).toBe(413)
    expect(['end', 'reset']).toContain(exchange.ended)
    expect(refusals.map((refused) => refused.code)).toEqual(['payload_too_large'])
    await expectNothingRecorded()
  })
})
