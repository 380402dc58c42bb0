import { connect, type Socket } from 'node:net'
import { useTestDatabase } from '@outbox/test-harness'
import { afterEach, describe, expect, it } from 'vitest'
import { CORE, type ConsumerCore } from '../src/core/internal.js'
import { createLargeBodyPace, FREE_BODY_BYTES } from '../src/core/large-body-pace.js'
import { type Consumer, createConsumer } from '../src/index.js'
import { ADAPTERS, type Running, requestHead, startServer } from './servers.js'
import { delivery, makeEvent, newSecret, post, quiet, until } from './support.js'

const t = useTestDatabase()

describe('the pace of large bodies (a virtual schedule)', () => {
  it('reads a burst at once, then each chunk after the bytes scheduled before it, and restarts after a quiet spell', () => {
    let now = 0
    // 1,000 bytes a second (1 ms a byte), 500 bytes at once.
    const pace = createLargeBodyPace(1000, 500, () => now)
    expect(pace.wait(500)).toBe(0) // the burst
    expect(pace.wait(500)).toBe(500) // after the first 500 bytes' half second
    expect(pace.wait(100)).toBe(600) // in arrival order: after both
    now = 5000 // a quiet spell: what went unused is not saved up beyond the burst
    expect(pace.wait(500)).toBe(0)
    expect(pace.wait(1)).toBe(1)
  })
})

/** A forger: well-formed signature headers over a large body it sends at once, as fast as TCP takes it. */
interface Forger {
  readonly socket: Socket
  status(): number | undefined
}

function forge(port: number, secret: string, bytes: number): Forger {
  // Headers signed for another body: they pass the header checks, so only the whole body's HMAC can refuse it.
  const { headers } = delivery(makeEvent(), { secrets: secret })
  const socket = connect({ port, host: '127.0.0.1' })
  let response = ''
  socket.on('data', (chunk: Buffer) => {
    response += chunk.toString('latin1')
  })
  socket.on('error', () => {})
  socket.write(requestHead({ ...headers, 'content-length': String(bytes) }))
  socket.write(Buffer.alloc(bytes, 'a'))
  return {
    socket,
    status: () => {
      const match = /^HTTP\/1\.1 (\d{3})/.exec(response)
      return match === null ? undefined : Number(match[1])
    },
  }
}

const running: Running[] = []
const forgers: Forger[] = []
afterEach(async () => {
  for (const forger of forgers.splice(0)) forger.socket.destroy()
  for (const server of running.splice(0)) await server.close()
})

const gateOf = (consumer: Consumer) => (consumer as unknown as { [CORE]: ConsumerCore })[CORE].bodies

describe('large bodies are paced; real deliveries are not', () => {
  for (const adapter of ADAPTERS) {
    it(`a real delivery is applied while a forged large body waits its turn, unread past its burst (${adapter})`, async () => {
      const secret = newSecret()
      const consumer = createConsumer({
        db: t.db,
        secret,
        logger: quiet,
        maxBodyBytes: 1024 * 1024,
        // 4 KiB a second with a 1 KiB burst: the forged body's 448 KiB past its free 64 KiB would take minutes.
        largeBodyBytesPerSecond: 4096,
      })
      const server = await startServer(adapter, consumer, { handler: () => {} })
      running.push(server)
      const forger = forge(server.port, secret, 512 * 1024)
      forgers.push(forger)
      const gate = gateOf(consumer)
      // The consumer has started on the forged body (some adapters' servers hand over a body they buffered).
      await until(() => gate.reading === 1, 'the forged body to be read')

      const event = makeEvent({ aggregateId: `paced-${adapter}` })
      const real = delivery(event, { secrets: secret })
      const answer = await post(server.url, real.body, real.headers)
      expect(answer.status).toBe(200)
      expect(answer.json).toMatchObject({ status: 'applied' })
      // The forged body still waits its turn: not refused yet, still being read, what it holds within its free
      // bytes, one chunk and the burst (never the whole body).
      expect(forger.status()).toBeUndefined()
      expect(gate.reading).toBe(1)
      // (The fetch adapter's server hands over the body it buffered: the pace holds its verification, not its bytes.)
      if (adapter !== 'fetch') expect(gate.bytes).toBeLessThan(FREE_BODY_BYTES + 2 * 65_536 + 1024)
    })

    it(`a body whose turn comes after its deadline is answered 408 and lets go of everything it held (${adapter})`, async () => {
      const secret = newSecret()
      const consumer = createConsumer({
        db: t.db,
        secret,
        logger: quiet,
        maxBodyBytes: 1024 * 1024,
        largeBodyBytesPerSecond: 4096,
        bodyTimeoutMs: 300,
      })
      const refused: string[] = []
      consumer.on('receipt:refused', ({ code }) => refused.push(code))
      const server = await startServer(adapter, consumer, { handler: () => {} })
      running.push(server)
      forgers.push(forge(server.port, secret, 512 * 1024))
      await until(() => refused.length === 1, 'the paced body to be answered')
      expect(refused).toEqual(['request_timeout'])
      const gate = gateOf(consumer)
      expect(gate.reading).toBe(0)
      expect(gate.bytes).toBe(0)
    })
  }
})
