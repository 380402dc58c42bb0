import { useTestDatabase } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { createConsumer } from '../src/index.js'
import { createEffects, delivery, makeEvent, newSecret, quiet, recorded, writeEffect } from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
})

/** A request body that counts what was pulled from it, endless unless `bytes` is given. */
function countingStream(chunk: Uint8Array, bytes = Number.POSITIVE_INFINITY) {
  const pulled = { bytes: 0 }
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (pulled.bytes >= bytes) return controller.close()
        pulled.bytes += chunk.byteLength
        controller.enqueue(chunk)
      },
      // No queue of its own: a chunk is pulled only when the reader asks for it.
    },
    { highWaterMark: 0 },
  )
  return { stream, pulled }
}

function post(body: string | ReadableStream<Uint8Array>, headers: Record<string, string>): Request {
  return new Request('http://127.0.0.1/hooks', {
    method: 'POST',
    body,
    headers,
    duplex: 'half',
  } as RequestInit)
}

describe('consumer.fetch reads the body only once the headers pass, and never past the limit', () => {
  it('applies a delivery whose length is announced, read in one piece', async () => {
    const event = makeEvent()
    const { body, headers } = delivery(event)
    const onWebhook = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet }).fetch((e, trx) =>
      writeEffect(trx, e),
    )
    const answer = await onWebhook(
      post(body, { ...headers, 'content-length': String(Buffer.byteLength(body)) }),
    )
    expect(answer.status).toBe(200)
    expect(await answer.json()).toMatchObject({ status: 'applied', eventId: event.eventId })
    expect(answer.headers.get('connection')).toBeNull()
    expect(await recorded(t.db, event)).toMatchObject({ processed: 1, effects: 1 })
  })

  it('refuses a forged request with an announced length on its headers, without pulling a byte', async () => {
    const secret = newSecret()
    const { stream, pulled } = countingStream(new Uint8Array(64 * 1024).fill(97), 1024 * 1024)
    const onWebhook = createConsumer({ db: t.db, secret, logger: quiet }).fetch(() => {
      throw new Error('a forged request reached the handler')
    })
    const answer = await onWebhook(
      post(stream, { 'content-type': 'application/json', 'content-length': String(1024 * 1024) }),
    )
    expect(answer.status).toBe(401)
    expect(answer.headers.get('connection')).toBe('close')
    expect(pulled.bytes).toBe(0)
  })

  it('stops reading a chunked body at maxBodyBytes and answers 413 with the connection closed', async () => {
    const { stream, pulled } = countingStream(new Uint8Array(64 * 1024).fill(97))
    const limit = 512 * 1024
    const onWebhook = createConsumer({
      db: t.db,
      allowUnsigned: true,
      logger: quiet,
      maxBodyBytes: limit,
    }).fetch(() => {
      throw new Error('an oversized request reached the handler')
    })
    const answer = await onWebhook(post(stream, { 'content-type': 'application/json' }))
    expect(answer.status).toBe(413)
    expect(answer.headers.get('connection')).toBe('close')
    expect(pulled.bytes).toBeLessThanOrEqual(limit + 64 * 1024)
  })
})
