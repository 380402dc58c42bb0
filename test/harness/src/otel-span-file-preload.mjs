// Preloaded into a child process (`NODE_OPTIONS=--import <this file>`) by tests that trace a real `outbox relay`:
// it registers what an application's OpenTelemetry setup registers — a tracer provider, the W3C trace-context
// propagator and an AsyncLocalStorage context manager — before the CLI's own code runs, and appends every span that
// ends to the file named by OUTBOX_TEST_SPANS_FILE as one JSON line, so the test process can read the child's spans.
import { appendFileSync } from 'node:fs'
import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core'
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'

const file = process.env.OUTBOX_TEST_SPANS_FILE
if (!file) throw new Error('OUTBOX_TEST_SPANS_FILE must name the file the spans are appended to')

/** A span exporter that writes each span as one line: what a test asserts on, nothing more. */
const exporter = {
  export(spans, done) {
    for (const span of spans) {
      const { traceId, spanId } = span.spanContext()
      const line = {
        name: span.name,
        kind: span.kind,
        traceId,
        spanId,
        parentSpanId: span.parentSpanContext?.spanId ?? null,
        attributes: span.attributes,
      }
      appendFileSync(file, `${JSON.stringify(line)}\n`)
    }
    done({ code: ExportResultCode.SUCCESS })
  },
  shutdown: async () => {},
}

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
propagation.setGlobalPropagator(new W3CTraceContextPropagator())
trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
)
