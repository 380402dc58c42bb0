import { createRequire } from 'node:module'
import type * as OpenTelemetry from '@opentelemetry/api'
import type { DeliveryOutcome } from './delivery.js'
import type { DeliveryTarget } from './delivery-target.js'
import type { Logger } from './logger.js'
import type { ClaimedLane, LaneEvent } from './sql/claimed-lane.js'
import { selectTraceContexts } from './sql/select-trace-contexts.js'
import type { SqlContext } from './sql/sql-context.js'

/**
 * The OpenTelemetry glue of the producer: `enqueue` records the active trace context with the event, and the relay
 * delivers each event in a span that continues it and sends it on in `traceparent`/`tracestate`.
 *
 * `@opentelemetry/api` is an optional peer dependency: it is looked up once, at the first use, and without it every
 * function here returns at its first line — no span, no header, no extra statement, no cost an enqueue could
 * measure. With it but no tracer provider registered (the API's no-op), the relay reads no trace contexts either.
 * The API keeps its registrations on `globalThis`, so the application's own import of it (ESM or CommonJS, any
 * compatible 1.x) and ours see the same provider, propagator and context manager.
 */

/** The tracer's name: the instrumentation scope spans are reported under. */
export const TRACER_NAME = '@outbox/producer'

/** The only carrier fields kept: the W3C trace context. Baggage is not sent on, to the subscriber or the table. */
const FIELDS = ['traceparent', 'tracestate'] as const

/** The loaded API; null when it is not installed; undefined until the first look. */
let api: typeof OpenTelemetry | null | undefined

/** `@opentelemetry/api` when the application has it installed, else null; looked up once per process. */
export function openTelemetry(): typeof OpenTelemetry | null {
  if (api === undefined) {
    try {
      // createRequire, not import(): a synchronous look-up, so enqueue never waits on it. The API ships CommonJS,
      // whose module state ESM importers share.
      api = createRequire(import.meta.url)('@opentelemetry/api') as typeof OpenTelemetry
    } catch {
      api = null
    }
  }
  return api
}

/**
 * The producer's tracer when a tracer provider is registered, else undefined. The API's global provider is a proxy
 * that hands out no-op tracers until an SDK registers one; asking the proxy for its delegate tells the two apart
 * without starting a span.
 */
export function registeredTracer(otel: typeof OpenTelemetry): OpenTelemetry.Tracer | undefined {
  const provider = otel.trace.getTracerProvider()
  // Duck-typed, not instanceof: the proxy may come from another copy of the API (a bundle, an ESM/CJS pair).
  const proxy = provider as Partial<Pick<OpenTelemetry.ProxyTracerProvider, 'getDelegateTracer'>>
  return typeof proxy.getDelegateTracer === 'function'
    ? proxy.getDelegateTracer(TRACER_NAME)
    : provider.getTracer(TRACER_NAME)
}

/** The carrier fields the registered propagator wrote, or undefined when it wrote no `traceparent`. */
function traceFields(
  otel: typeof OpenTelemetry,
  context: OpenTelemetry.Context,
): Record<string, string> | undefined {
  const carrier: Record<string, string> = {}
  otel.propagation.inject(context, carrier)
  if (carrier.traceparent === undefined) return undefined
  const fields: Record<string, string> = {}
  for (const field of FIELDS) if (carrier[field] !== undefined) fields[field] = carrier[field]
  return fields
}

/**
 * The trace context to store with an event being enqueued: the active span's, as the application's registered
 * propagator writes it (W3C trace context: NodeSDK's default), kept to `traceparent` and `tracestate` and stored as
 * JSON text. Null without the API, without an active span, or with a propagator that writes no `traceparent`.
 */
export function activeTraceContext(): string | null {
  const otel = openTelemetry()
  if (otel === null) return null
  const active = otel.context.active()
  if (otel.trace.getSpan(active) === undefined) return null
  const fields = traceFields(otel, active)
  return fields === undefined ? null : JSON.stringify(fields)
}

/** Trace contexts read for the rows a relay holds; weak, so a row's entry goes with the row. */
const storedContexts = new WeakMap<LaneEvent, Record<string, string>>()

/** What reading trace contexts needs from the relay: its SQL context and its logger. */
export type TraceReadContext = SqlContext & { readonly logger: Logger }

/**
 * Reads the stored trace contexts of the rows a claim returned, in one statement for the whole claim, when a
 * tracer provider is registered (otherwise nothing is read: the relay's cost without tracing is unchanged). Never
 * throws: a failed read is logged and those events are delivered in spans of their own trace.
 */
export async function readClaimedTraceContexts(
  ctx: TraceReadContext,
  lanes: readonly ClaimedLane[],
): Promise<void> {
  const otel = openTelemetry()
  if (otel === null || lanes.length === 0 || registeredTracer(otel) === undefined) return
  await readTraceContexts(
    ctx,
    lanes.flatMap((lane) => lane.events),
  )
}

/** {@link readClaimedTraceContexts} for the further rows of a lane its owner goes on delivering. */
export async function readLaneTraceContexts(
  ctx: TraceReadContext,
  rows: readonly LaneEvent[],
): Promise<void> {
  const otel = openTelemetry()
  if (otel === null || rows.length === 0 || registeredTracer(otel) === undefined) return
  await readTraceContexts(ctx, rows)
}

async function readTraceContexts(ctx: TraceReadContext, rows: readonly LaneEvent[]): Promise<void> {
  if (rows.length === 0) return
  let found: Map<string, string>
  try {
    found = await selectTraceContexts(ctx, { ids: rows.map((row) => row.id) })
  } catch (error) {
    ctx.logger.warn(
      { err: error },
      'reading the trace contexts of claimed events failed; delivering them untraced',
    )
    return
  }
  for (const row of rows) {
    const text = found.get(row.id)
    if (text === undefined) continue
    try {
      const parsed = JSON.parse(text) as unknown
      if (typeof parsed === 'object' && parsed !== null)
        storedContexts.set(row, parsed as Record<string, string>)
    } catch {
      // Not written by enqueue: the event is delivered in a trace of its own.
    }
  }
}

/** Sends one request with the given trace headers (none when tracing is off). */
export type TracedSend = (
  traceHeaders: Readonly<Record<string, string>> | undefined,
) => Promise<DeliveryOutcome>

/**
 * Runs one delivery attempt, in a span when a tracer provider is registered.
 *
 * The span follows OpenTelemetry's messaging conventions: kind PRODUCER, named `send <event type>` — the relay
 * sends the message on to its subscriber; an HTTP client instrumentation, if any, adds its CLIENT span beneath it,
 * which is why this one is not CLIENT itself (client spans do not nest). Its parent is the context the event was
 * enqueued under, so the producer's request, every delivery and the consumer's processing are ONE trace. Every
 * attempt and every subscription's delivery is a span of its own, a sibling under that parent: a retry is a
 * second `send` span with a higher `outbox.attempt`, and a fan-out to two subscriptions is two spans. (The
 * conventions allow the creation context as parent or as a link; a parent keeps the trace whole in every backend,
 * where a link would leave each delivery in a trace of its own.) An event enqueued without a trace context gets a
 * span with no parent. The request carries the span's `traceparent`/`tracestate`; the consumer continues it.
 */
export function traceDelivery(
  target: Pick<DeliveryTarget, 'subscriptionId' | 'name'>,
  row: LaneEvent,
  send: TracedSend,
): Promise<DeliveryOutcome> {
  const otel = openTelemetry()
  const tracer = otel === null ? undefined : registeredTracer(otel)
  // Untraced, the request's own promise: no span, and no promise of ours around it at every delivery.
  if (otel === null || tracer === undefined) return send(undefined)
  return sendInSpan(otel, tracer, target, row, send)
}

/** {@link traceDelivery} with a tracer registered: the attempt in its `send` span. */
async function sendInSpan(
  otel: typeof OpenTelemetry,
  tracer: OpenTelemetry.Tracer,
  target: Pick<DeliveryTarget, 'subscriptionId' | 'name'>,
  row: LaneEvent,
  send: TracedSend,
): Promise<DeliveryOutcome> {
  const stored = storedContexts.get(row)
  const parent =
    stored === undefined ? otel.ROOT_CONTEXT : otel.propagation.extract(otel.ROOT_CONTEXT, stored)
  const span = tracer.startSpan(
    `send ${row.eventType}`,
    {
      kind: otel.SpanKind.PRODUCER,
      attributes: {
        'messaging.system': 'outbox',
        'messaging.operation.name': 'send',
        'messaging.operation.type': 'send',
        'messaging.destination.name': target.name,
        'messaging.message.id': row.eventId,
        'outbox.event.type': row.eventType,
        'outbox.aggregate.type': row.aggregateType,
        'outbox.aggregate.id': row.aggregateId,
        'outbox.sequence': row.sequence,
        'outbox.subscription.id': target.subscriptionId,
        'outbox.attempt': row.attempts + 1,
      },
    },
    parent,
  )
  const inSpan = otel.trace.setSpan(parent, span)
  let outcome: DeliveryOutcome
  try {
    outcome = await otel.context.with(inSpan, () => send(traceFields(otel, inSpan)))
  } catch (error) {
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: String(error) })
    span.end()
    throw error
  }
  span.setAttribute('outbox.outcome', outcome.kind)
  if (outcome.kind !== 'aborted' && outcome.httpStatus !== null)
    span.setAttribute('http.response.status_code', outcome.httpStatus)
  if (outcome.kind === 'failure') {
    span.setAttribute('error.type', outcome.httpStatus === null ? 'network' : String(outcome.httpStatus))
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: outcome.error })
  }
  span.end()
  return outcome
}
