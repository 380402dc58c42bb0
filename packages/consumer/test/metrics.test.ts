import { useTestDatabase } from '@outbox/test-harness'
import { Registry } from 'prom-client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { consumerMetrics, createConsumer } from '../src/index.js'
import {
  appWith,
  createEffects,
  delivery,
  listen,
  makeEvent,
  newSecret,
  post,
  quiet,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const register = new Registry()
let server: { url: string; close: () => Promise<void> }
let stop: () => void

beforeAll(async () => {
  await createEffects(t.db)
  const consumer = createConsumer({ db: t.db, secret, source: 'orders', logger: quiet })
  ;({ stop } = await consumerMetrics(consumer, { register }))
  server = await listen(
    appWith(
      consumer.dedupe(async (event, trx) => {
        if (event.type === 'order.broken') throw new Error('the handler fails')
        await writeEffect(trx, event)
      }),
    ),
  )
})

afterAll(async () => {
  await server.close()
})

/** The value of one sample line, e.g. `outbox_consumer_receipts_total{…}`; 0 when absent. */
async function sample(name: string, labels: Record<string, string>): Promise<number> {
  const metric = await register.getSingleMetric(name)?.get()
  const value = metric?.values.find((entry) =>
    Object.entries(labels).every(([key, wanted]) => String(entry.labels[key]) === wanted),
  )
  return value?.value ?? 0
}

describe('consumerMetrics counts every answer on the application registry', () => {
  it('counts outcomes by source, outcome and code, and times handlers and requests', async () => {
    const event = makeEvent({ aggregateId: 'metrics-1' })
    const first = delivery(event, { secrets: secret })
    expect((await post(server.url, first.body, first.headers)).status).toBe(200)
    expect((await post(server.url, first.body, first.headers)).json.status).toBe('duplicate_ignored')
    const forged = delivery(makeEvent(), { secrets: newSecret() })
    expect((await post(server.url, forged.body, forged.headers)).status).toBe(401)
    const broken = delivery(makeEvent({ type: 'order.broken', aggregateId: 'metrics-2' }), {
      secrets: secret,
    })
    expect((await post(server.url, broken.body, broken.headers)).status).toBe(500)

    const counts = (outcome: string, code: string) =>
      sample('outbox_consumer_receipts_total', { source: 'orders', outcome, code })
    expect(await counts('applied', 'applied')).toBe(1)
    expect(await counts('duplicate', 'duplicate_ignored')).toBe(1)
    expect(await counts('refused', 'invalid_signature')).toBe(1)
    expect(await counts('failed', 'handler_failed')).toBe(1)
    expect(await sample('outbox_consumer_handler_duration_seconds', { source: 'orders', le: '+Inf' })).toBe(1)
    expect(
      await sample('outbox_consumer_request_duration_seconds', {
        source: 'orders',
        outcome: 'refused',
        le: '+Inf',
      }),
    ).toBe(1)
    expect(await register.metrics()).toMatch(/# TYPE outbox_consumer_receipts_total counter/)
  })

  it('reuses the metrics when called twice on one registry, and stop() detaches', async () => {
    const other = createConsumer({ db: t.db, secret, source: 'orders', logger: quiet })
    const second = await consumerMetrics(other, { register })
    second.stop()
    stop()
    const before = await sample('outbox_consumer_receipts_total', { outcome: 'applied' })
    const event = delivery(makeEvent({ aggregateId: 'metrics-3' }), { secrets: secret })
    expect((await post(server.url, event.body, event.headers)).status).toBe(200)
    expect(await sample('outbox_consumer_receipts_total', { outcome: 'applied' })).toBe(before)
  })
})
