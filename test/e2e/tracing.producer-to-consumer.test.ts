// One trace across the hop: a request span wraps enqueue in a transaction, a real relay delivers the event to a real
// consumer (the node adapter) on its own database, and the OpenTelemetry SDK's in-memory exporter shows the request
// span → the relay's `send` span → the consumer's `process` span, with the handler running inside the last. A retry
// after a 500 is a second `send` span of the same trace; a fan-out to two subscriptions is two. Without a tracer
// provider registered, nothing is stored and no trace header is sent.
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SpanKind, trace } from '@opentelemetry/api'
import { createConsumer } from '@outbox/consumer'
import {
  createSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { useTestDatabase } from '@outbox/test-harness'
import { type InMemoryTracing, installInMemoryTracing, type ReadableSpan } from '@outbox/test-harness/tracing'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const producer = useTestDatabase()
const consumerDatabase = useTestDatabase()
const closers: (() => Promise<void>)[] = []

beforeAll(async () => {
  await disableSubscription(producer.db, IMPLICIT_SUBSCRIPTION_ID)
  await sql`CREATE TABLE applied (source text, event_id uuid, span_id text)`.execute(consumerDatabase.db)
})

afterAll(async () => {
  await Promise.all(closers.map((close) => close()))
})

/** What the consumer's handler saw, per call: the request's trace header and the span active in the handler. */
interface HandlerCall {
  readonly traceparent: string | undefined
  readonly activeSpanId: string | undefined
}

/**
 * A real consumer (node adapter) on the consumer's database. `failures` first calls throw, so the consumer answers
 * 500 and the relay retries; then the handler records the event with the span id active inside it.
 */
async function serveConsumer(source: string, secret: string, failures = 0) {
  const calls: HandlerCall[] = []
  let failuresLeft = failures
  const consumer = createConsumer({ db: consumerDatabase.db, secret, source, logger: silentLogger })
  const server = createServer(
    consumer.node(async (event, trx, req: IncomingMessage) => {
      const activeSpanId = trace.getActiveSpan()?.spanContext().spanId
      calls.push({ traceparent: req.headers.traceparent as string | undefined, activeSpanId })
      if (failuresLeft > 0) {
        failuresLeft -= 1
        throw new Error('the subscriber is down for a moment')
      }
      await trx
        .insertInto('applied')
        .values({ source, event_id: event.eventId, span_id: activeSpanId ?? null })
        .execute()
    }),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
  const { id } = await createSubscription(producer.db, { url, secret, name: source })
  return { id, calls }
}

/** Runs a relay for the given subscriptions until a cycle does nothing; retries are due at once. */
async function drain(subscriptions: string[]): Promise<{ delivered: number; failed: number }> {
  const relay = new Relay({
    db: producer.db,
    subscriptions,
    allowPrivateNetworks: true,
    retrySchedule: [0, 0, 0],
    logger: silentLogger,
  })
  let delivered = 0
  let failed = 0
  for (let cycle = 0; cycle < 20; cycle++) {
    const result = await relay.runOnce()
    delivered += result.delivered
    failed += result.failed
    if (result.delivered + result.failed + result.dead === 0) break
  }
  return { delivered, failed }
}

/** The producer's "request": a span around a business transaction that enqueues one event. */
async function requestEnqueuing(
  aggregateId: string,
): Promise<{ eventId: string; spanId: string; traceId: string }> {
  return await trace
    .getTracer('orders-service')
    .startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
      try {
        const { eventId } = await producer.db.transaction().execute((trx) =>
          enqueue(trx, {
            aggregateType: 'order',
            aggregateId,
            eventType: 'order.created',
            payload: { aggregateId },
          }),
        )
        return { eventId, ...span.spanContext() }
      } finally {
        span.end()
      }
    })
}

async function storedTraceContexts(eventId: string): Promise<(string | null)[]> {
  const { rows } = await sql<{ trace_context: string | null }>`
    SELECT trace_context FROM outbox WHERE event_id = ${eventId} ORDER BY subscription_id`.execute(
    producer.db,
  )
  return rows.map((row) => row.trace_context)
}

const secret = () => `whsec_${randomBytes(24).toString('base64')}`

describe('without a tracer provider registered', () => {
  it('stores no trace context and sends no trace header', async () => {
    expect(trace.getActiveSpan()).toBeUndefined()
    const consumer = await serveConsumer('untraced', secret())
    const { eventId } = await requestEnqueuing('u1')
    expect(await storedTraceContexts(eventId)).toEqual([null])
    expect(await drain([consumer.id])).toEqual({ delivered: 1, failed: 0 })
    expect(consumer.calls).toEqual([{ traceparent: undefined, activeSpanId: undefined }])
    await disableSubscription(producer.db, consumer.id)
  })
})

describe('with the OpenTelemetry SDK registered', () => {
  let tracing: InMemoryTracing
  beforeAll(() => {
    tracing = installInMemoryTracing()
  })
  afterAll(async () => {
    await tracing?.uninstall()
  })

  const byName = (prefix: string) => tracing.spans().filter((span) => span.name.startsWith(prefix))
  const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId

  it('makes one trace from the request through a retried delivery to the consumer’s effect', async () => {
    tracing.reset()
    const consumer = await serveConsumer('traced', secret(), 1)
    const request = await requestEnqueuing('t1')

    // The event carries the request's context: its trace, with the request span as the parent.
    const [stored] = await storedTraceContexts(request.eventId)
    expect(JSON.parse(stored!)).toEqual({ traceparent: `00-${request.traceId}-${request.spanId}-01` })

    expect(await drain([consumer.id])).toEqual({ delivered: 1, failed: 1 })

    const sends = byName('send ')
    const processes = byName('process')
    expect(sends.map((span) => span.name)).toEqual(['send order.created', 'send order.created'])
    for (const send of sends) {
      expect(send.spanContext().traceId).toBe(request.traceId)
      expect(parentOf(send)).toBe(request.spanId)
      expect(send.kind).toBe(SpanKind.PRODUCER)
      expect(send.attributes).toMatchObject({
        'messaging.system': 'outbox',
        'messaging.message.id': request.eventId,
        'messaging.destination.name': 'traced',
        'outbox.event.type': 'order.created',
        'outbox.aggregate.type': 'order',
        'outbox.aggregate.id': 't1',
        'outbox.sequence': 1,
        'outbox.subscription.id': consumer.id,
      })
    }
    // The retry is a second span under the same parent, one attempt later, each with the consumer's answer.
    expect(sends.map((span) => span.attributes['outbox.attempt'])).toEqual([1, 2])
    expect(sends.map((span) => span.attributes['http.response.status_code'])).toEqual([500, 200])
    expect(sends.map((span) => span.attributes['outbox.outcome'])).toEqual(['failure', 'success'])
    expect(sends[0]!.spanContext().spanId).not.toBe(sends[1]!.spanContext().spanId)

    // Each request's traceparent names its send span; the consumer's span continues it.
    expect(consumer.calls.map((call) => call.traceparent)).toEqual(
      sends.map((send) => `00-${request.traceId}-${send.spanContext().spanId}-01`),
    )
    expect(processes.map((span) => span.name)).toEqual(['process order.created', 'process order.created'])
    processes.forEach((process, index) => {
      expect(process.kind).toBe(SpanKind.CONSUMER)
      expect(process.spanContext().traceId).toBe(request.traceId)
      expect(parentOf(process)).toBe(sends[index]!.spanContext().spanId)
      expect(process.attributes['messaging.message.id']).toBe(request.eventId)
    })
    expect(processes.map((span) => span.attributes['outbox.outcome'])).toEqual([
      'failed:handler_failed',
      'applied',
    ])
    // The handler — and its transaction — ran inside the consumer's span.
    expect(consumer.calls.map((call) => call.activeSpanId)).toEqual(
      processes.map((span) => span.spanContext().spanId),
    )
    const { rows } = await sql<{ span_id: string }>`
      SELECT span_id FROM applied WHERE source = 'traced'`.execute(consumerDatabase.db)
    expect(rows).toEqual([{ span_id: processes[1]!.spanContext().spanId }])
    await disableSubscription(producer.db, consumer.id)
  })

  it('gives each subscription of a fan-out its own delivery span in the same trace', async () => {
    tracing.reset()
    const first = await serveConsumer('fan-a', secret())
    const second = await serveConsumer('fan-b', secret())
    const request = await requestEnqueuing('f1')
    const stored = await storedTraceContexts(request.eventId)
    // One row per subscription (the two disabled earlier ones are paused and keep receiving), each with the context.
    expect(stored.length).toBeGreaterThanOrEqual(2)
    expect(new Set(stored)).toEqual(
      new Set([JSON.stringify({ traceparent: `00-${request.traceId}-${request.spanId}-01` })]),
    )

    expect(await drain([first.id, second.id])).toEqual({ delivered: 2, failed: 0 })
    const sends = byName('send ')
    expect(sends.map((span) => span.attributes['outbox.subscription.id']).sort()).toEqual(
      [first.id, second.id].sort(),
    )
    for (const send of sends) {
      expect(send.spanContext().traceId).toBe(request.traceId)
      expect(parentOf(send)).toBe(request.spanId)
    }
    const processes = byName('process')
    expect(processes).toHaveLength(2)
    expect(new Set(processes.map(parentOf))).toEqual(new Set(sends.map((send) => send.spanContext().spanId)))
    expect(processes.every((span) => span.spanContext().traceId === request.traceId)).toBe(true)
  })

  it('delivers an event enqueued outside any span in a trace of its own, and the consumer continues it', async () => {
    tracing.reset()
    const consumer = await serveConsumer('no-parent', secret())
    const { eventId } = await producer.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId: 'n1', eventType: 'order.created', payload: {} }),
      )
    expect((await storedTraceContexts(eventId)).every((context) => context === null)).toBe(true)
    expect(await drain([consumer.id])).toEqual({ delivered: 1, failed: 0 })
    const [send] = byName('send ')
    const [process] = byName('process')
    expect(parentOf(send!)).toBeUndefined()
    expect(parentOf(process!)).toBe(send!.spanContext().spanId)
    expect(consumer.calls[0]!.traceparent).toBe(
      `00-${send!.spanContext().traceId}-${send!.spanContext().spanId}-01`,
    )
  })
})
