import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { readBody, WholeBody } from '../src/core/read-body.js'

/** Posts `body` to a server whose handler waits until the whole body is in the request's buffer, then reads it. */
async function readArrived(body: string, limitBytes: number) {
  let counted = 0
  let peak = 0
  const server = createServer(async (req: IncomingMessage, res) => {
    while (req.readableLength < Number(req.headers['content-length'])) await sleep(5)
    const read = await readBody(req, {
      limitBytes,
      timeoutMs: 60_000,
      onBytes: (delta) => {
        counted += delta
        peak = Math.max(peak, counted)
      },
    })
    res.setHeader('connection', 'close')
    res.end(JSON.stringify(read.ok ? { ok: true, body: Buffer.from(read.body).toString() } : read))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  try {
    const { port } = server.address() as AddressInfo
    const response = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body })
    return { result: await response.json(), counted, peak }
  } finally {
    server.close()
  }
}

describe('readBody on a body that has already arrived', () => {
  it('takes it from the buffer whole, and counts it while held', async () => {
    const body = JSON.stringify({ text: 'é'.repeat(300) })
    const { result, counted, peak } = await readArrived(body, 4096)
    expect(result).toEqual({ ok: true, body })
    expect(counted).toBe(0)
    expect(peak).toBe(Buffer.byteLength(body))
  })

  it('still refuses it past limitBytes', async () => {
    const { result, counted } = await readArrived('x'.repeat(2000), 1000)
    expect(result).toEqual({ ok: false, reason: 'too_large', unread: true })
    expect(counted).toBe(0)
  })
})

describe('readBody on a WholeBody', () => {
  const options = { limitBytes: 1000, timeoutMs: 50 }

  it('gives the bytes it read', async () => {
    const bytes = new TextEncoder().encode('{"a":1}')
    expect(await readBody(new WholeBody(async () => bytes), options)).toEqual({ ok: true, body: bytes })
  })

  it('answers timeout when the read outlasts the deadline, and aborted when it fails', async () => {
    const late = new WholeBody(
      () => new Promise((resolve) => setTimeout(() => resolve(new Uint8Array(1)), 500)),
    )
    expect(await readBody(late, options)).toEqual({ ok: false, reason: 'timeout' })
    const failed = new WholeBody(() => Promise.reject(new Error('reset')))
    expect(await readBody(failed, options)).toMatchObject({ ok: false, reason: 'aborted' })
  })

  it('refuses bytes past the limit', async () => {
    const big = new WholeBody(async () => new Uint8Array(1001))
    expect(await readBody(big, options)).toEqual({ ok: false, reason: 'too_large', unread: true })
  })

  it('holds a large body until its turn, and lets go of it at the deadline', async () => {
    let counted = 0
    const pace = { wait: () => 200 }
    const large = new WholeBody(async () => new Uint8Array(100_000))
    const started = performance.now()
    // A deadline far past the turn: on a slow machine the turn still comes first, whatever the delay before it.
    const read = await readBody(large, {
      limitBytes: 200_000,
      timeoutMs: 60_000,
      pace,
      onBytes: (delta) => {
        counted += delta
      },
    })
    expect(read.ok).toBe(true)
    expect(performance.now() - started).toBeGreaterThanOrEqual(190)
    expect(counted).toBe(0)
    const cut = await readBody(large, {
      limitBytes: 200_000,
      timeoutMs: 50,
      pace,
      onBytes: (d) => (counted += d),
    })
    expect(cut).toEqual({ ok: false, reason: 'timeout' })
    expect(counted).toBe(0)
  })
})
