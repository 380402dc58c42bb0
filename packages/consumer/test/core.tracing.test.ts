// The core's span, through the fetch adapter (the e2e suite drives the node adapter): it continues the sender's
// traceparent, keeps its tracestate, runs the handler inside it, and says how the request ended — applied,
// duplicate_ignored, or the refusal's code; and a request without trace headers starts a trace of its own.
import { SpanKind, trace } from '@opentelemetry/api'
import { useTestDatabase } from '@outbox/test-harness'
import { type InMemoryTracing, installInMemoryTracing } from '@outbox/test-harness/tracing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer } from '../src/index.js'
import { createEffects, delivery, makeEvent, newSecret, quiet, writeEffect } from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const SENDER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const SENDER_SPAN = '00f067aa0ba902b7'
let tracing: InMemoryTracing
let hooks: (request: Request) => Promise<Response>
const handlerSpans: (string | undefined)[] = []

beforeAll(async () => {
  tracing = installInMemoryTracing()
  await createEffects(t.db)
  hooks = createConsumer({ db: t.db, secret, logger: quiet }).fetch(async (event, trx) => {
    handlerSpans.push(trace.getActiveSpan()?.spanContext().spanId)
    await writeEffect(trx, event)
  })
})
afterAll(async () => {
  await tracing?.uninstall()
})

function request(body: string, headers: Record<string, string>): Request {
  return new Request('http://127.0.0.1/hooks', { method: 'POST', headers, body })
}

describe('the consumer core’s span', () => {
  it('continues the sender’s trace, with the handler inside, and reports applied then duplicate_ignored', async () => {
    tracing.reset()
    const event = makeEvent({ aggregateId: 'trace-1', type: 'order.paid' })
    const { body, headers } = delivery(event, { secrets: secret })
    const traced = {
      ...headers,
      traceparent: `00-${SENDER_TRACE}-${SENDER_SPAN}-01`,
      tracestate: 'relay=1',
    }
    expect((await hooks(request(body, traced))).status).toBe(200)
    expect((await hooks(request(body, traced))).status).toBe(200)

    const spans = tracing.spans()
    expect(spans.map((span) => span.name)).toEqual(['process order.paid', 'process order.paid'])
    for (const span of spans) {
      expect(span.kind).toBe(SpanKind.CONSUMER)
      expect(span.spanContext().traceId).toBe(SENDER_TRACE)
      expect(span.parentSpanContext?.spanId).toBe(SENDER_SPAN)
      expect(span.spanContext().traceState?.serialize()).toBe('relay=1')
      expect(span.attributes).toMatchObject({
        'messaging.system': 'outbox',
        'messaging.message.id': event.eventId,
        'outbox.aggregate.id': 'trace-1',
        'outbox.sequence': 1,
        'http.response.status_code': 200,
      })
    }
    expect(spans.map((span) => span.attributes['outbox.outcome'])).toEqual(['applied', 'duplicate_ignored'])
    // The handler ran once (the duplicate is answered before it), inside the first span.
    expect(handlerSpans).toEqual([spans[0]!.spanContext().spanId])
  })

  it('reports a refusal by its code, and starts a trace of its own without trace headers', async () => {
    tracing.reset()
    const { body, headers } = delivery(makeEvent({ aggregateId: 'trace-2' }), { secrets: newSecret() })
    expect((await hooks(request(body, headers))).status).toBe(401)
    const [span] = tracing.spans()
    expect(span!.parentSpanContext).toBeUndefined()
    expect(span!.name).toBe('process')
    expect(span!.attributes['outbox.outcome']).toBe('refused:invalid_signature')
  })
})
