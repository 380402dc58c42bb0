import { useTestDatabase } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type Refusal, type WebhookRequest } from '../src/index.js'
import { createEffects, delivery, makeEvent, newSecret, quiet, recorded, writeEffect } from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const MAX_BODY_BYTES = 4096
const CHUNK_BYTES = 1024
/** More chunks than any test lets the consumer read: what a sender that never stops would offer. */
const OFFERED_CHUNKS = 1000

beforeAll(async () => {
  await createEffects(t.db)
})

function handler() {
  const seen: WebhookRequest[] = []
  const refusals: { refused: Refusal; req: WebhookRequest }[] = []
  const consumer = createConsumer({ db: t.db, secret, logger: quiet, maxBodyBytes: MAX_BODY_BYTES })
  const handle = consumer.handle(
    async (event, trx, req) => {
      seen.push(req)
      await writeEffect(trx, event)
    },
    { onError: (refused, req) => refusals.push({ refused, req }) },
  )
  return { handle, seen, refusals }
}

/** `text` as a web stream of small chunks, pulled on demand. */
function webStream(text: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text)
  let at = 0
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) return controller.close()
      controller.enqueue(bytes.subarray(at, at + 7))
      at += 7
    },
  })
}

/** `text` as an async iterable of small string chunks. */
async function* iterable(text: string): AsyncGenerator<string> {
  for (let at = 0; at < text.length; at += 7) yield text.slice(at, at + 7)
}

describe('consumer.handle reads a streamed body itself', () => {
  it('applies a signed event whose body is a web ReadableStream', async () => {
    const { handle, seen } = handler()
    const event = makeEvent({ aggregateId: 'handle-web-stream' })
    const { body, headers } = delivery(event, { secrets: secret })
    const request: WebhookRequest = { method: 'POST', headers: new Headers(headers), body: webStream(body) }
    const answer = await handle(request)
    expect(answer.status).toBe(200)
    expect(JSON.parse(answer.body)).toEqual({ status: 'applied', eventId: event.eventId })
    expect(answer.closeConnection).toBe(false)
    expect(seen).toEqual([request])
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('applies a signed event whose body is an async iterable, and answers its redelivery as a duplicate', async () => {
    const { handle } = handler()
    const event = makeEvent({ aggregateId: 'handle-iterable' })
    const { body, headers } = delivery(event, { secrets: secret })
    const answer = await handle({ method: 'POST', headers, body: iterable(body) })
    expect(answer.status).toBe(200)
    expect(JSON.parse(answer.body)).toEqual({ status: 'applied', eventId: event.eventId })
    const again = await handle({ method: 'POST', headers, body: iterable(body) })
    expect(JSON.parse(again.body)).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('stops pulling a web stream past maxBodyBytes: 413, closeConnection, the stream cancelled', async () => {
    const { handle, refusals } = handler()
    const { headers } = delivery(makeEvent(), { secrets: secret })
    let pulled = 0
    let cancelled = false
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulled === OFFERED_CHUNKS) return controller.close()
        pulled++
        controller.enqueue(new Uint8Array(CHUNK_BYTES))
      },
      cancel() {
        cancelled = true
      },
    })
    const request: WebhookRequest = { method: 'POST', headers, body: endless }
    const answer = await handle(request)
    expect(answer.status).toBe(413)
    expect(answer.closeConnection).toBe(true)
    expect(JSON.parse(answer.body)).toMatchObject({ code: 'payload_too_large', limitBytes: MAX_BODY_BYTES })
    expect(cancelled).toBe(true)
    // The limit plus one chunk, and what the stream's own queue asked for ahead: nowhere near the end.
    expect(pulled).toBeLessThan(MAX_BODY_BYTES / CHUNK_BYTES + 3)
    expect(refusals.map(({ refused, req }) => [refused.code, req])).toEqual([['payload_too_large', request]])
  })

  it('stops iterating an async iterable past maxBodyBytes: 413, closeConnection, the iterator returned', async () => {
    const { handle } = handler()
    const { headers } = delivery(makeEvent(), { secrets: secret })
    let yielded = 0
    let finish = () => {}
    const finished = new Promise<void>((resolve) => {
      finish = resolve
    })
    async function* endless(): AsyncGenerator<Uint8Array> {
      try {
        for (; yielded < OFFERED_CHUNKS; yielded++) yield new Uint8Array(CHUNK_BYTES)
      } finally {
        finish()
      }
    }
    const answer = await handle({ method: 'POST', headers, body: endless() })
    expect(answer.status).toBe(413)
    expect(answer.closeConnection).toBe(true)
    expect(yielded).toBe(MAX_BODY_BYTES / CHUNK_BYTES)
    // `return()` runs the generator's finally block: the source is told to stop, not left suspended.
    await finished
  })

  it('refuses missing signature headers without touching the stream at all', async () => {
    const { handle } = handler()
    const { headers } = delivery(makeEvent()) // not signed
    let pulled = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled++
        controller.enqueue(new Uint8Array(CHUNK_BYTES))
      },
    })
    const answer = await handle({ method: 'POST', headers, body })
    expect(answer.status).toBe(401)
    expect(answer.closeConnection).toBe(true)
    expect(body.locked).toBe(false)
    // A ReadableStream pulls once on its own to fill its queue; the consumer took no reader.
    expect(pulled).toBeLessThanOrEqual(1)
  })
})
