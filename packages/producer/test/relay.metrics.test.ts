import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { Relay, silentLogger, stats } from '../src/index.js'
import { metricValue, seedEvents, storeSubscriptions } from './support.js'

const t = useTestDatabase()

describe('Prometheus metrics', () => {
  it('a metrics endpoint exposes delivery counters, the latency histogram and gauges with the right values', async () => {
    await seedEvents(t.db, ['m-ok-1', 'm-ok-2', 'm-dead', 'm-gap'], 2)
    const sink = await startSink((request) => {
      const id = request.json.aggregate_id as string
      if (id === 'm-dead') return { status: 500 }
      if (id === 'm-gap') return { status: 409 }
      return { status: 200, body: { status: 'applied' } }
    })
    const register = new Registry()
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: [0],
      metrics: { register },
      logger: silentLogger,
    })
    const server = createServer(async (_req, res) => {
      res.writeHead(200, { 'content-type': register.contentType })
      res.end(await register.metrics())
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      await relay.runOnce()
      await relay.runOnce()
      const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)
      const text = await response.text()
      expect(
        metricValue(
          text,
          'outbox_deliveries_total',
          '{subscription="default",outcome="success",status="200"}',
        ),
      ).toBe(4)
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="default",outcome="retry",status="500"}'),
      ).toBe(1)
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="default",outcome="dead",status="500"}'),
      ).toBe(1)
      expect(
        metricValue(
          text,
          'outbox_deliveries_total',
          '{subscription="default",outcome="conflict",status="409"}',
        ),
        // One 409 per request the sink answered so: the second cycle sends the parked head again when more than
        // the park's 100 ms (the floor under retrySchedule [0]) has passed between the cycles, as on a loaded machine.
      ).toBe(sink.requests.filter((request) => request.json.aggregate_id === 'm-gap').length)
      expect(metricValue(text, 'outbox_delivery_latency_seconds_count', '{subscription="default"}')).toBe(4)
      const current = await stats(t.db)
      expect(current).toMatchObject({ pending: 3, dead: 1, blocked: 1, inFlight: 0 })
      expect(metricValue(text, 'outbox_pending')).toBe(current.pending)
      expect(metricValue(text, 'outbox_dead')).toBe(current.dead)
      expect(metricValue(text, 'outbox_blocked')).toBe(current.blocked)
      expect(metricValue(text, 'outbox_in_flight')).toBe(0)
      expect(metricValue(text, 'outbox_struggling')).toBe(0)
      expect(metricValue(text, 'outbox_lag_seconds')).toBeGreaterThan(0)
    } finally {
      server.close()
      await sink.close()
    }
  })

  it('labels the delivery counters and the latency histogram with each subscription’s name', async () => {
    const okSink = await startSink()
    const failing = await startSink(() => ({ status: 500 }))
    const register = new Registry()
    await storeSubscriptions(t.db, { ok: { url: okSink.url }, failing: { url: failing.url } })
    try {
      await seedEvents(t.db, ['s-1', 's-2'], 1)
      const relay = new Relay({
        db: t.db,
        allowPrivateNetworks: true,
        retrySchedule: [0],
        metrics: { register },
        logger: silentLogger,
      })
      await relay.runOnce()
      await relay.runOnce()
      const text = await register.metrics()
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="ok",outcome="success",status="200"}'),
      ).toBe(2)
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="failing",outcome="retry",status="500"}'),
      ).toBe(2)
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="failing",outcome="dead",status="500"}'),
      ).toBe(2)
      expect(
        metricValue(text, 'outbox_deliveries_total', '{subscription="ok",outcome="retry",status="500"}'),
      ).toBeUndefined()
      expect(metricValue(text, 'outbox_delivery_latency_seconds_count', '{subscription="ok"}')).toBe(2)
      expect(
        metricValue(text, 'outbox_delivery_latency_seconds_count', '{subscription="failing"}'),
      ).toBeUndefined()
    } finally {
      await okSink.close()
      await failing.close()
      await sql`DELETE FROM outbox_subscription WHERE name IN ('ok', 'failing')`.execute(t.db)
      await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE name = 'default'`.execute(t.db)
    }
  })

  it('refuses a metrics option without a registry', () => {
    expect(() => new Relay({ db: t.db, endpoint: 'http://127.0.0.1:9/h', metrics: {} as never })).toThrow(
      /prom-client Registry/,
    )
  })
})
