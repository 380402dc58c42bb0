import { request } from 'node:http'
import { networkInterfaces } from 'node:os'
import { requires } from '@outbox/test-harness'
import { Registry } from 'prom-client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fromLoopback, RelayHttpServer } from '../src/cli/relay-http.js'

/** An address of this machine that is not loopback, to probe from as another host would (none on some machines). */
const outside = Object.values(networkInterfaces())
  .flat()
  .find((entry) => entry !== undefined && entry.family === 'IPv4' && !entry.internal)?.address
const fromOutside = requires(
  'readiness probe from another address',
  outside === undefined
    ? { available: false, missing: 'no non-loopback IPv4 address on this machine (connect it to a network)' }
    : { available: true, value: outside },
)

const REASON = 'database: db.internal:5432 refused the connection'
let server: RelayHttpServer

beforeAll(async () => {
  server = await RelayHttpServer.listen({
    host: '0.0.0.0',
    port: 0,
    register: new Registry(),
    readiness: async () => ({ ready: false, reason: REASON }),
  })
})
afterAll(() => server.close())

function get(host: string, path: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    request({ host, port: server.port, path }, (response) => {
      let text = ''
      response.on('data', (chunk) => {
        text += chunk
      })
      response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) }))
    })
      .on('error', reject)
      .end()
  })
}

describe('/readyz', () => {
  it('gives its reason, which names the database host, to a probe from this machine', async () => {
    expect(await get('127.0.0.1', '/readyz')).toEqual({
      status: 503,
      body: { status: 'not ready', reason: REASON },
    })
  })

  fromOutside.it('gives a bare status to a probe from another address', async () => {
    expect(await get(fromOutside.value, '/readyz')).toEqual({ status: 503, body: { status: 'not ready' } })
  })

  it('counts IPv4, IPv4-mapped and IPv6 loopback as this machine, and nothing else', () => {
    for (const address of ['127.0.0.1', '127.3.2.1', '::1', '::ffff:127.0.0.1']) {
      expect(fromLoopback(address), address).toBe(true)
    }
    for (const address of ['10.0.0.1', '192.0.2.2', '::ffff:10.1.1.1', 'fd00::2', undefined]) {
      expect(fromLoopback(address), String(address)).toBe(false)
    }
  })
})
