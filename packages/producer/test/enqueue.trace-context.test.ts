// What enqueue stores of the active trace: the span's W3C context on every row of the event (each subscription's),
// through enqueue's nine-argument overload and enqueueMany's extra statement; nothing outside a span; and the
// stored context is a prefix the relay can continue (one trace id, the request span as parent).
import { context, createTraceState, trace } from '@opentelemetry/api'
import { openKysely, useTestDatabase } from '@outbox/test-harness'
import { type InMemoryTracing, installInMemoryTracing } from '@outbox/test-harness/tracing'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSubscription, enqueue, enqueueMany } from '../src/index.js'
import { outboxRowsRead } from './support.js'

const t = useTestDatabase()
let tracing: InMemoryTracing

beforeAll(async () => {
  tracing = installInMemoryTracing()
  // A second subscription, so each event is two rows.
  await createSubscription(t.db, { url: 'https://subscriber.example/hooks' })
})
afterAll(async () => {
  await tracing?.uninstall()
})

async function contextsOf(eventIds: readonly string[]): Promise<(string | null)[]> {
  const { rows } = await sql<{ trace_context: string | null }>`
    SELECT trace_context FROM outbox WHERE event_id = ANY(${eventIds}::uuid[])
    ORDER BY event_id, subscription_id`.execute(t.db)
  return rows.map((row) => row.trace_context)
}

/** Runs `work` in a recording span, as a traced request handler would; returns its result and the expected context. */
async function inSpan<T>(work: () => Promise<T>): Promise<{ result: T; expected: string }> {
  return await trace.getTracer('test').startActiveSpan('request', async (span) => {
    try {
      const { traceId, spanId } = span.spanContext()
      return { result: await work(), expected: JSON.stringify({ traceparent: `00-${traceId}-${spanId}-01` }) }
    } finally {
      span.end()
    }
  })
}

const event = (aggregateId: string) => ({
  aggregateType: 'order',
  aggregateId,
  eventType: 'order.created',
  payload: { aggregateId },
})

describe('the trace context enqueue stores', () => {
  it('enqueue in a span stores its context on each subscription’s row', async () => {
    const { result, expected } = await inSpan(() =>
      t.db.transaction().execute((trx) => enqueue(trx, event('a1'))),
    )
    expect(result.sequence).toBe(1)
    expect(await contextsOf([result.eventId])).toEqual([expected, expected])
  })

  it('enqueueMany in a span stores it on every row of every event', async () => {
    const { result, expected } = await inSpan(() =>
      t.db.transaction().execute((trx) => enqueueMany(trx, [event('m1'), event('m2'), event('m1')])),
    )
    expect(result.map((one) => one.sequence)).toEqual([1, 1, 2])
    expect(await contextsOf(result.map((one) => one.eventId))).toEqual(Array(6).fill(expected))
  })

  it('stores nothing outside a span, and keeps tracestate when the span has one', async () => {
    const plain = await t.db.transaction().execute((trx) => enqueue(trx, event('p1')))
    const many = await t.db.transaction().execute((trx) => enqueueMany(trx, [event('p2')]))
    expect(await contextsOf([plain.eventId, many[0]!.eventId])).toEqual([null, null, null, null])

    // A remote parent with a tracestate (as an incoming request would carry), continued by a local span.
    const parent = trace.setSpanContext(context.active(), {
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      traceFlags: 1,
      isRemote: true,
      traceState: createTraceState('vendor=opaque'),
    })
    const stored = await context.with(parent, () =>
      inSpan(() => t.db.transaction().execute((trx) => enqueue(trx, event('s1')))),
    )
    const [text] = await contextsOf([stored.result.eventId])
    const parsed = JSON.parse(text!) as { traceparent: string; tracestate: string }
    expect(parsed.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/)
    expect(parsed.tracestate).toBe('vendor=opaque')
  })

  it('in a span on a fresh install, each enqueue still finds its rows by key once the outbox has grown (migration 0018)', async () => {
    await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
    // A fresh install: statistics of an empty outbox, and no autovacuum ANALYZE to replan on the way.
    await sql`ANALYZE outbox`.execute(t.db)
    await sql`ALTER TABLE outbox SET (autovacuum_enabled = false)`.execute(t.db)
    // One connection, so the last enqueue runs the plans the first ones made (plans are kept per connection).
    const db = openKysely(t.url, { max: 1 })
    try {
      const tracedEnqueue = () =>
        inSpan(() =>
          db.transaction().execute(async (trx) => {
            const before = await outboxRowsRead(trx)
            await enqueue(trx, event('fresh'))
            return (await outboxRowsRead(trx)) - before
          }),
        )
      // Past PostgreSQL's first five custom plans, so the cached generic one is what runs from then on.
      for (let n = 0; n < 6; n++) await tracedEnqueue()
      await sql`
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, payload_bytes,
                            status, available_at, sent_at)
        SELECT gen_random_uuid(), 'history', 'h' || (n % 1000), n / 1000 + 1, 'history.entry', '{}', 2, 'sent',
               now(), now()
        FROM generate_series(0, 4999) AS n`.execute(t.db)
      const { result: rowsRead } = await tracedEnqueue()
      // The event's two rows (one per subscription), found by event id: a plan that scanned the outbox for them read
      // all of its 5,000 rows and more.
      expect(rowsRead).toBeLessThan(100)
    } finally {
      await db.destroy()
      await sql`ALTER TABLE outbox RESET (autovacuum_enabled)`.execute(t.db)
    }
  })
})
