import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'

/** An OpenTelemetry SDK registered for a test: the spans it exported, and how to take it down again. */
export interface InMemoryTracing {
  /** Every span ended so far, in the order they ended. */
  spans(): ReadableSpan[]
  /** Forgets the spans exported so far. */
  reset(): void
  /** Unregisters the provider, propagator and context manager: the API is a no-op again. */
  uninstall(): Promise<void>
}

/**
 * Registers what an application's OpenTelemetry setup registers — a tracer provider, the W3C trace-context
 * propagator and an AsyncLocalStorage context manager — with a `SimpleSpanProcessor` over an
 * `InMemorySpanExporter`, so a test reads every span the moment it ends. One at a time per process.
 */
export function installInMemoryTracing(): InMemoryTracing {
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  const contextManager = new AsyncLocalStorageContextManager().enable()
  if (!context.setGlobalContextManager(contextManager))
    throw new Error('a context manager is registered already')
  if (!propagation.setGlobalPropagator(new W3CTraceContextPropagator()))
    throw new Error('a propagator is registered already')
  if (!trace.setGlobalTracerProvider(provider)) throw new Error('a tracer provider is registered already')
  return {
    spans: () => exporter.getFinishedSpans(),
    reset: () => exporter.reset(),
    uninstall: async () => {
      await provider.shutdown()
      trace.disable()
      propagation.disable()
      context.disable()
    },
  }
}

export type { ReadableSpan }
