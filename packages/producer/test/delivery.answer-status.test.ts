import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { WebhookSender } from '../src/delivery.js'
import { systemClock } from '../src/runtime.js'

/** Answers 200 with the body named by the request's path (the case's index), byte for byte. */
let server: Server
let base: string
const bodies: string[] = []

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const body = bodies[Number(req.url!.slice(1))]!
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
      res.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

const EVENT = {
  eventId: '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a',
  type: 'order.created',
  aggregateType: 'order',
  aggregateId: '42',
  sequence: 1,
  occurredAt: new Date(0).toISOString(),
}

describe("the consumer's status in a 2xx answer", () => {
  // The text dedupe answers is recognised without parsing; every other text must read exactly as JSON.parse reads it.
  const cases: readonly [string, string | null][] = [
    ['{"status":"applied"}', 'applied'],
    ['{"status":"duplicate_ignored","eventId":"0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a"}', 'duplicate_ignored'],
    ['{"status":"stale_ignored","eventId":"evt_1"}', 'stale_ignored'],
    ['{"status":"applied","eventId":"evt_\\"quoted\\""}', 'applied'],
    ['{"eventId":"evt_1","status":"applied"}', 'applied'],
    ['{ "status": "applied" }', 'applied'],
    ['{"status":"applied","eventId":"evt_1","extra":true}', 'applied'],
    ['{"status":"applied","eventId":"evt_1"', null],
    ['{"status":"applied","eventId":"a\u0001b"}', null],
    ['{"status":"applied"}trailing', null],
    ['{"status":"applied","eventId":"evt_1"}}', null],
    ['{"status":"weird"}', null],
    ['{"status":"applied', null],
    ['OK', null],
    ['', null],
  ]

  it.each(cases.map(([body, status], index) => ({ body, status, index })))(
    'reads $body as $status',
    async ({ body, status, index }) => {
      bodies[index] = body
      const sender = new WebhookSender({ keys: [], timeoutMs: 5000, clock: systemClock })
      try {
        const outcome = await sender.send(`${base}/${index}`, EVENT, '{}')
        expect(outcome).toMatchObject({ kind: 'success', httpStatus: 200, deliveryStatus: status })
        // The same verdict as parsing the whole body.
        let parsed: unknown = null
        try {
          parsed = (JSON.parse(body) as { status?: unknown }).status ?? null
        } catch {}
        expect(
          ['applied', 'duplicate_ignored', 'stale_ignored'].includes(parsed as string) ? parsed : null,
        ).toBe(status)
      } finally {
        await sender.close()
      }
    },
  )
})
