import { useTestDatabase } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type ReceiptEventMap } from '../src/index.js'
import {
  createEffects,
  delivery,
  makeEvent,
  newSecret,
  quiet,
  recorded,
  recordingLogger,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const SOURCE = 'billing'

beforeAll(async () => {
  await createEffects(t.db)
})

type Heard = { [K in keyof ReceiptEventMap]: { name: K; payload: ReceiptEventMap[K] } }[keyof ReceiptEventMap]

/** A consumer whose handler throws for events of type `order.broken`, with every receipt event recorded. */
function listening() {
  const consumer = createConsumer({ db: t.db, secret, logger: quiet, source: SOURCE })
  const heard: Heard[] = []
  const names = [
    'receipt:applied',
    'receipt:duplicate',
    'receipt:stale',
    'receipt:refused',
    'receipt:failed',
  ] as const
  for (const name of names) consumer.on(name, (payload: any) => heard.push({ name, payload }))
  const failure = new Error('the warehouse is closed')
  const handle = consumer.handle(async (event, trx) => {
    if (event.type === 'order.broken') throw failure
    await writeEffect(trx, event)
  })
  const send = (event: ReturnType<typeof makeEvent>, secrets = secret) => {
    const { body, headers } = delivery(event, { secrets })
    return handle({ method: 'POST', headers, body: new TextEncoder().encode(body) })
  }
  return { consumer, heard, send, failure }
}

const ref = (event: ReturnType<typeof makeEvent>) => ({
  source: SOURCE,
  eventId: event.eventId,
  eventType: event.type,
  aggregateType: event.aggregateType,
  aggregateId: event.aggregateId,
  sequence: event.sequence,
})
const ms = expect.any(Number)

describe('receipt events', () => {
  it('receipt:applied and receipt:duplicate carry the event and the timings', async () => {
    const { heard, send } = listening()
    const event = makeEvent({ aggregateId: 'events-applied' })
    expect((await send(event)).status).toBe(200)
    expect((await send(event)).status).toBe(200)
    expect(heard).toEqual([
      { name: 'receipt:applied', payload: { ...ref(event), handlerMs: ms, durationMs: ms } },
      { name: 'receipt:duplicate', payload: { ...ref(event), payloadMismatch: false, durationMs: ms } },
    ])
    const applied = heard[0]!.payload as ReceiptEventMap['receipt:applied']
    expect(applied.handlerMs).toBeGreaterThanOrEqual(0)
    expect(applied.durationMs).toBeGreaterThanOrEqual(applied.handlerMs)
  })

  it('receipt:stale carries the cursor that made the event stale', async () => {
    const { heard, send } = listening()
    const newer = makeEvent({ aggregateId: 'events-stale', sequence: 2 })
    const older = makeEvent({ aggregateId: 'events-stale', sequence: 1 })
    expect(JSON.parse((await send(newer)).body).status).toBe('applied')
    expect(JSON.parse((await send(older)).body).status).toBe('stale_ignored')
    expect(heard.map((entry) => entry.name)).toEqual(['receipt:applied', 'receipt:stale'])
    expect(heard[1]).toEqual({
      name: 'receipt:stale',
      payload: { ...ref(older), cursor: 2, durationMs: ms },
    })
  })

  it('receipt:refused carries the status, code and detail, and the id from the headers', async () => {
    const { heard, send } = listening()
    const event = makeEvent({ aggregateId: 'events-refused' })
    expect((await send(event, newSecret())).status).toBe(401)
    expect(heard).toEqual([
      {
        name: 'receipt:refused',
        payload: {
          source: SOURCE,
          eventId: event.eventId,
          eventType: undefined,
          aggregateType: undefined,
          aggregateId: undefined,
          sequence: undefined,
          status: 401,
          code: 'invalid_signature',
          detail: expect.any(String),
          durationMs: ms,
        },
      },
    ])
  })

  it("receipt:failed carries the handler's own error, and nothing is recorded", async () => {
    const { heard, send, failure } = listening()
    const event = makeEvent({ aggregateId: 'events-failed', type: 'order.broken' })
    expect((await send(event)).status).toBe(500)
    expect(heard).toEqual([
      {
        name: 'receipt:failed',
        payload: {
          ...ref(event),
          status: 500,
          code: 'handler_failed',
          detail: expect.any(String),
          error: failure,
          durationMs: ms,
        },
      },
    ])
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })

  it('a listener that throws does not change the answer; once fires once; off and the returned function remove', async () => {
    const { consumer, send } = listening()
    consumer.on('receipt:applied', () => {
      throw new Error('a broken listener')
    })
    const once: string[] = []
    consumer.once('receipt:applied', ({ eventId }) => once.push(eventId ?? ''))
    const removed: string[] = []
    const byOff = ({ eventId }: { eventId?: string | undefined }) => removed.push(eventId ?? '')
    consumer.on('receipt:applied', byOff)
    const stop = consumer.on('receipt:applied', ({ eventId }) => removed.push(eventId ?? ''))
    consumer.off('receipt:applied', byOff)
    stop()
    const first = makeEvent({ aggregateId: 'events-listeners', sequence: 1 })
    const second = makeEvent({ aggregateId: 'events-listeners', sequence: 2 })
    expect(JSON.parse((await send(first)).body).status).toBe('applied')
    expect(JSON.parse((await send(second)).body).status).toBe('applied')
    expect(once).toEqual([first.eventId])
    expect(removed).toEqual([])
  })

  it('an async listener that rejects is logged, never an unhandled rejection that would end the process', async () => {
    const logger = recordingLogger()
    const consumer = createConsumer({ db: t.db, secret, logger, source: SOURCE })
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    try {
      const rejection = new Error('the alerting service is down')
      consumer.on('receipt:applied', async () => {
        throw rejection
      })
      const handle = consumer.handle(async (event, trx) => writeEffect(trx, event))
      const { body, headers } = delivery(makeEvent({ aggregateId: 'events-async-listener' }), {
        secrets: secret,
      })
      const answer = await handle({ method: 'POST', headers, body: new TextEncoder().encode(body) })
      expect(JSON.parse(answer.body).status).toBe('applied')
      await new Promise(setImmediate) // past the microtasks, where Node reports an unhandled rejection
      expect(unhandled).toEqual([])
      const errors = logger.lines.filter((line) => line.level === 'error')
      expect(errors).toHaveLength(1)
      expect(errors[0]!.msg).toMatch(/listener threw/)
      expect(errors[0]!.meta).toMatchObject({ event: 'receipt:applied', err: rejection })
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
  })
})
