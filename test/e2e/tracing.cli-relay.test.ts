// `outbox relay --metrics-port`, run as a service runs it (the real CLI process, an OpenTelemetry SDK preloaded with
// NODE_OPTIONS as an application's setup would be), is traced, scraped and probed: the event enqueued inside a
// request span is delivered with a `traceparent` naming the relay's `send` span, which continues the request's
// trace; the metrics port counts the delivery and answers both probes.
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { type SpanContext, SpanKind, trace } from '@opentelemetry/api'
import { enqueue } from '@outbox/producer'
import { freePort, startSink, useTestDatabase } from '@outbox/test-harness'
import { installInMemoryTracing } from '@outbox/test-harness/tracing'
import { beforeAll, expect, it } from 'vitest'
import { buildCli, cliEnv, startCli } from '../../packages/producer/test/cli-process.js'
import { metricValue } from '../../packages/producer/test/support.js'

const PRELOAD = fileURLToPath(new URL('../harness/src/otel-span-file-preload.mjs', import.meta.url))

/** One span as the preloaded exporter wrote it. */
interface WrittenSpan {
  readonly name: string
  readonly kind: SpanKind
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | null
  readonly attributes: Record<string, unknown>
}

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

it('a CLI relay with an OpenTelemetry SDK continues the request’s trace, and its metrics port counts and probes', async ({
  onTestFinished,
}) => {
  const tracing = installInMemoryTracing()
  onTestFinished(() => tracing.uninstall())
  const sink = await startSink()
  onTestFinished(() => sink.close())

  let request: SpanContext | undefined
  await trace
    .getTracer('orders-service')
    .startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
      await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'cli-traced',
          eventType: 'order.created',
          payload: { orderId: 'cli-traced' },
        }),
      )
      request = span.spanContext()
      span.end()
    })

  const spansFile = join(mkdtempSync(join(tmpdir(), 'outbox-cli-trace-')), 'spans.jsonl')
  const port = await freePort()
  const relay = startCli(
    ['relay', '--endpoint', sink.url, '--metrics-port', String(port), '--metrics-host', '127.0.0.1'],
    cliEnv({
      DATABASE_URL: t.url,
      NODE_OPTIONS: `--import ${pathToFileURL(PRELOAD).href}`,
      OUTBOX_TEST_SPANS_FILE: spansFile,
    }),
    { onTestFinished },
  )
  await expect.poll(() => sink.requests.length, { timeout: 30_000 }).toBe(1)

  // The request carries the relay's span, in the trace the producer's request started.
  const traceparent = sink.requests[0]!.headers.traceparent as string | undefined
  expect(traceparent).toMatch(new RegExp(`^00-${request!.traceId}-[0-9a-f]{16}-01$`))
  const spans = async () =>
    existsSync(spansFile)
      ? readFileSync(spansFile, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((line) => JSON.parse(line) as WrittenSpan)
      : []
  await expect.poll(async () => (await spans()).some((span) => span.name === 'send order.created')).toBe(true)
  const send = (await spans()).find((span) => span.name === 'send order.created')!
  expect(send).toMatchObject({
    kind: SpanKind.PRODUCER,
    traceId: request!.traceId,
    parentSpanId: request!.spanId,
  })
  expect(traceparent!.split('-')[2]).toBe(send.spanId)

  // The same process serves its metrics and both probes.
  const get = (path: string) => fetch(`http://127.0.0.1:${port}${path}`)
  expect((await get('/healthz')).status).toBe(200)
  await expect.poll(async () => (await get('/readyz')).status, { timeout: 15_000 }).toBe(200)
  await expect
    .poll(async () =>
      metricValue(
        await (await get('/metrics')).text(),
        'outbox_deliveries_total',
        '{subscription="default",outcome="success",status="200"}',
      ),
    )
    .toBe(1)
  expect((await relay.stop('SIGTERM')).code).toBe(0)
})
