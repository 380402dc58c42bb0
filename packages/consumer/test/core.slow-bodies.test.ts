import { connect, type Socket } from 'node:net'
import { useTestDatabase } from '@outbox/test-harness'
import { afterEach, describe, expect, it } from 'vitest'
import { CORE, type ConsumerCore } from '../src/core/internal.js'
import { type Consumer, createConsumer } from '../src/index.js'
import { ADAPTERS, type Running, requestHead, startServer } from './servers.js'
import { delivery, makeEvent, newSecret, post, quiet, recordingLogger, until } from './support.js'

const t = useTestDatabase()

const MAX_BODY_BYTES = 64 * 1024
const SLOTS = 4

/** A client that sends well-formed signed headers and then trickles its body a byte at a time, never finishing. */
interface Trickler {
  readonly socket: Socket
  /** The status the server answered with, once it did. */
  status(): number | undefined
  /** True once the server closed the connection. */
  closed(): boolean
}

function trickle(
  port: number,
  headers: Record<string, string>,
  announcedBytes: number,
  firstBytes = 16,
): Trickler {
  const socket = connect({ port, host: '127.0.0.1' })
  let response = ''
  let closed = false
  socket.on('data', (chunk: Buffer) => {
    response += chunk.toString('latin1')
  })
  socket.on('error', () => {}) // a reset is one way the server closes it
  socket.on('close', () => {
    closed = true
    clearInterval(timer)
  })
  socket.write(requestHead({ ...headers, 'content-length': String(announcedBytes) }))
  // The start of a body at once, so every adapter has bytes to hold; then a byte at a time.
  socket.write(`{"id":"${'x'.repeat(Math.max(0, firstBytes - 7))}`)
  const timer = setInterval(() => {
    if (!socket.destroyed) socket.write('x')
  }, 20)
  return {
    socket,
    status: () => {
      const match = /^HTTP\/1\.1 (\d{3})/.exec(response)
      return match === null ? undefined : Number(match[1])
    },
    closed: () => closed,
  }
}

const running: Running[] = []
const clients: Trickler[] = []
afterEach(async () => {
  for (const client of clients.splice(0)) client.socket.destroy()
  for (const server of running.splice(0)) await server.close()
})

function signedHeaders(secret: string): Record<string, string> {
  // Valid headers (id, timestamp, signature format) over a body that never arrives: they pass the header checks,
  // so the consumer starts reading — what an attacker with no secret can always do.
  const { headers } = delivery(makeEvent(), { secrets: secret })
  return headers
}

const bodies = (consumer: Consumer) => (consumer as unknown as { [CORE]: ConsumerCore })[CORE].bodies

describe('slow bodies', () => {
  for (const adapter of ADAPTERS) {
    it(`a flood of trickled bodies is cut by the body deadline and holds at most maxBodyBytes × maxConcurrentBodies (${adapter})`, async () => {
      const secret = newSecret()
      const consumer = createConsumer({
        db: t.db,
        secret,
        logger: quiet,
        maxBodyBytes: MAX_BODY_BYTES,
        bodyTimeoutMs: 300,
        maxConcurrentBodies: SLOTS,
      })
      const refused: string[] = []
      consumer.on('receipt:refused', ({ code }) => refused.push(code))
      const server = await startServer(adapter, consumer, { handler: () => {} })
      running.push(server)
      // Each sends most of an allowed body at once: twelve held at once would be far past the bound of four.
      const flood = Array.from({ length: 12 }, () =>
        trickle(server.port, signedHeaders(secret), MAX_BODY_BYTES - 100, MAX_BODY_BYTES - 1000),
      )
      clients.push(...flood)

      // Every connection is answered and closed by the server, none left hanging on its body.
      await until(() => flood.every((client) => client.closed()), 'every trickling connection to be closed')
      // What the server answered (a client may miss the answer itself: closing on unread bytes can reset).
      await until(() => refused.length === flood.length, 'every request to be answered')
      for (const code of refused) expect(['request_timeout', 'server_busy']).toContain(code)
      expect(refused).toContain('request_timeout')
      for (const client of flood) expect([408, 503, undefined]).toContain(client.status())

      const gate = bodies(consumer)
      expect(gate.reading).toBe(0)
      expect(gate.bytes).toBe(0)
      expect(gate.peakBytes).toBeLessThanOrEqual(MAX_BODY_BYTES * SLOTS)
      // The core itself held the streamed bytes (the fetch adapter's server buffers a framed body for it).
      if (adapter !== 'fetch') expect(gate.peakBytes).toBeGreaterThanOrEqual(MAX_BODY_BYTES - 1000)
    })
  }

  it('past maxConcurrentBodies a request is turned away unread: 503 server_busy, Retry-After, connection closed', async () => {
    const secret = newSecret()
    const logger = recordingLogger()
    const consumer = createConsumer({
      db: t.db,
      secret,
      logger,
      maxBodyBytes: MAX_BODY_BYTES,
      bodyTimeoutMs: 600_000, // the two slow ones hold their slots for the whole test
      maxConcurrentBodies: 2,
    })
    const server = await startServer('node', consumer, { handler: () => {} })
    running.push(server)
    const gate = bodies(consumer)
    clients.push(
      trickle(server.port, signedHeaders(secret), 1000),
      trickle(server.port, signedHeaders(secret), 1000),
    )
    await until(() => gate.reading === 2, 'both slots to be taken')

    const third = trickle(server.port, signedHeaders(secret), 1000)
    clients.push(third)
    await until(() => third.closed(), 'the third connection to be closed')
    expect(third.status()).toBe(503)
    expect(gate.reading).toBe(2)
    expect(logger.lines.some((line) => line.level === 'warn' && line.meta?.code === 'server_busy')).toBe(true)
  })

  it('a body cut by the deadline is a 408 request_timeout, and the next one is read as usual', async () => {
    const secret = newSecret()
    const consumer = createConsumer({ db: t.db, secret, logger: quiet, bodyTimeoutMs: 200, sequence: 'off' })
    const refused: string[] = []
    consumer.on('receipt:refused', ({ code, status }) => refused.push(`${status} ${code}`))
    const server = await startServer('node', consumer, { handler: () => {} })
    running.push(server)
    const slow = trickle(server.port, signedHeaders(secret), 1000)
    clients.push(slow)
    await until(() => slow.closed(), 'the slow connection to be closed')
    expect(refused).toEqual(['408 request_timeout'])
    expect([408, undefined]).toContain(slow.status())
    expect(bodies(consumer).reading).toBe(0)

    const event = makeEvent()
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await post(server.url, body, headers)
    expect(answer.json).toEqual({ status: 'applied', eventId: event.eventId })
  })

  const timeoutWarnings = (logger: ReturnType<typeof recordingLogger>) =>
    logger.lines.filter((line) => line.level === 'warn' && line.msg.includes('no request timeout'))

  it('the Fastify plugin warns at registration when the server has no request timeout (Fastify 5 by default), a Node server on its default does not warn', async () => {
    const logger = recordingLogger()
    const consumer = createConsumer({ db: t.db, secret: newSecret(), logger })
    running.push(await startServer('fastify', consumer, { handler: () => {} }))
    expect(timeoutWarnings(logger).map((line) => line.meta?.server)).toEqual(['Fastify'])

    const node = await startServer('node', consumer, { handler: () => {} }) // Node's default: 300 s
    running.push(node)
    await post(node.url, '{}', { 'content-type': 'application/json' })
    expect(timeoutWarnings(logger)).toHaveLength(1)
  })

  // These adapters are a plain (req, res) function: they meet their server only through a request's socket, so
  // the warning comes at the first request, and only once however many follow.
  for (const adapter of ['node', 'express5', 'express4'] as const) {
    it(`warns once, at the first request, when the Node server under the ${adapter} adapter has requestTimeout 0`, async () => {
      const logger = recordingLogger()
      const consumer = createConsumer({ db: t.db, secret: newSecret(), logger })
      const server = await startServer(adapter, consumer, { handler: () => {} }, { requestTimeout: 0 })
      running.push(server)
      expect(timeoutWarnings(logger)).toHaveLength(0)

      await post(server.url, '{}', { 'content-type': 'application/json' })
      await post(server.url, '{}', { 'content-type': 'application/json' })
      expect(timeoutWarnings(logger).map((line) => line.meta)).toEqual([
        { server: 'node:http', requestTimeoutMs: 0 },
      ])
    })
  }
})
