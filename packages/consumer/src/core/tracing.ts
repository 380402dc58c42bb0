import { createRequire } from 'node:module'
import type * as OpenTelemetry from '@opentelemetry/api'
import type { ReceivedEvent } from '@outbox/protocol'
import type { WebhookResponse } from '../respond.js'
import { webhookHeaders } from './headers.js'
import type { Receipt, Receive, WebhookRequest } from './receive.js'

/**
 * The OpenTelemetry glue of the consumer core: every adapter goes through the core, so each of them gets a span per
 * webhook that continues the sender's trace from its `traceparent`/`tracestate` headers.
 *
 * `@opentelemetry/api` is an optional peer dependency: looked up once, at the first request; without it, or with
 * no tracer provider registered, a request costs one check and runs exactly as it does untraced.
 */

/** The tracer's name: the instrumentation scope spans are reported under. */
export const TRACER_NAME = '@outbox/consumer'

/** The loaded API; null when it is not installed; undefined until the first look. */
let api: typeof OpenTelemetry | null | undefined

/** `@opentelemetry/api` when the application has it installed, else null; looked up once per process. */
function openTelemetry(): typeof OpenTelemetry | null {
  if (api === undefined) {
    try {
      // Synchronous, so the first request does not wait on a dynamic import; ESM importers share its state.
      api = createRequire(import.meta.url)('@opentelemetry/api') as typeof OpenTelemetry
    } catch {
      api = null
    }
  }
  return api
}

/** The consumer's tracer when a tracer provider is registered (the API's global proxy has a delegate), else undefined. */
function registeredTracer(otel: typeof OpenTelemetry): OpenTelemetry.Tracer | undefined {
  const provider = otel.trace.getTracerProvider()
  // Duck-typed, not instanceof: the proxy may come from another copy of the API (a bundle, an ESM/CJS pair).
  const proxy = provider as Partial<Pick<OpenTelemetry.ProxyTracerProvider, 'getDelegateTracer'>>
  return typeof proxy.getDelegateTracer === 'function'
    ? proxy.getDelegateTracer(TRACER_NAME)
    : provider.getTracer(TRACER_NAME)
}

/** The context key under which the core finds its own span (not whatever span is active: an HTTP server's). */
let spanKey: symbol | undefined

/** The fields read from the sender's headers: the W3C trace context, nothing else (no baggage). */
const FIELDS = ['traceparent', 'tracestate'] as const

/** What one request's span ended with: the delivery status on a 200, the problem code otherwise. */
function outcomeOf(status: number, body: string): string {
  try {
    const parsed = JSON.parse(body) as { status?: unknown; code?: unknown }
    if (status === 200 && typeof parsed.status === 'string') return parsed.status
    if (typeof parsed.code === 'string')
      return status >= 500 ? `failed:${parsed.code}` : `refused:${parsed.code}`
  } catch {
    // Every answer of the core is JSON; anything else is reported by its status alone.
  }
  return status === 200 ? 'applied' : status >= 500 ? 'failed' : 'refused'
}

/**
 * Wraps the core so each request runs in a span of kind CONSUMER named `process` (then `process <event type>`),
 * following OpenTelemetry's messaging conventions: the consumer processes one message, and an HTTP server
 * instrumentation, if any, keeps its own SERVER span around it. Parent: the trace context in the request's
 * `traceparent`/`tracestate` headers — the relay's delivery span — so the handler's effect (its transaction, and
 * any spans its database client makes) lands in the producer's trace; when the active span (an HTTP
 * instrumentation's) already continues that same trace, the span goes under it instead. Without those headers the
 * span continues whatever is active, or starts a trace. `outbox.outcome` says how it ended: `applied`,
 * `duplicate_ignored`, `stale_ignored`, `refused:<code>` or `failed:<code>`.
 */
export function traceReceipts(receive: Receive): Receive {
  const traced = async function tracedReceive<TReq>(
    request: WebhookRequest,
    receipt: Receipt<TReq>,
    otel: typeof OpenTelemetry,
    tracer: OpenTelemetry.Tracer,
  ): Promise<WebhookResponse> {
    const headers = webhookHeaders(request.headers)
    const carrier: Record<string, string> = {}
    for (const field of FIELDS) {
      const value = headers.get(field)
      if (value !== undefined) carrier[field] = value
    }
    const active = otel.context.active()
    const extracted = otel.propagation.extract(active, carrier)
    const outer = otel.trace.getSpanContext(active)
    const remote = otel.trace.getSpanContext(extracted)
    const parent =
      outer !== undefined && remote !== undefined && outer.traceId === remote.traceId ? active : extracted
    const span = tracer.startSpan(
      'process',
      {
        kind: otel.SpanKind.CONSUMER,
        attributes: {
          'messaging.system': 'outbox',
          'messaging.operation.name': 'process',
          'messaging.operation.type': 'process',
        },
      },
      parent,
    )
    spanKey ??= otel.createContextKey('@outbox/consumer receipt span')
    const inSpan = otel.trace.setSpan(parent, span).setValue(spanKey, span)
    try {
      const response = await otel.context.with(inSpan, () => receive(request, receipt))
      span.setAttribute('http.response.status_code', response.status)
      span.setAttribute('outbox.outcome', outcomeOf(response.status, response.body))
      if (response.status >= 500) span.setStatus({ code: otel.SpanStatusCode.ERROR })
      return response
    } catch (error) {
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: String(error) })
      throw error
    } finally {
      span.end()
    }
  }
  // Untraced, the core's own promise is handed back: no second async frame per request.
  return function receiveMaybeTraced(request, receipt) {
    try {
      const otel = openTelemetry()
      const tracer = otel === null ? undefined : registeredTracer(otel)
      if (otel === null || tracer === undefined || typeof request !== 'object' || request === null)
        return receive(request, receipt)
      return traced(request, receipt, otel, tracer)
    } catch (error) {
      return Promise.reject(error)
    }
  }
}

/** Names the current request's span after its event, once the envelope is read; nothing when it is untraced. */
export function describeReceipt(event: ReceivedEvent<unknown>): void {
  if (api === null || api === undefined || spanKey === undefined) return
  const span = api.context.active().getValue(spanKey) as OpenTelemetry.Span | undefined
  if (span === undefined) return
  span.updateName(`process ${event.type}`)
  span.setAttribute('messaging.message.id', event.eventId)
  span.setAttribute('outbox.event.type', event.type)
  if (event.aggregateType !== undefined) span.setAttribute('outbox.aggregate.type', event.aggregateType)
  if (event.aggregateId !== undefined) span.setAttribute('outbox.aggregate.id', event.aggregateId)
  if (event.sequence !== undefined) span.setAttribute('outbox.sequence', event.sequence)
}
