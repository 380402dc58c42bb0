import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { Relay, silentLogger, stats } from '../src/index.js'
import { metricValue, seedEvents, storeSubscriptions, waitFor } from './support.js'

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
      // The names that say what they count, beside the old ones (kept until 0.3.0) with the same values.
      expect(metricValue(text, 'outbox_pending_events')).toBe(current.pending)
      expect(metricValue(text, 'outbox_dead_letter_events')).toBe(current.dead)
      expect(metricValue(text, 'outbox_blocked_lanes')).toBe(current.blocked)
      expect(metricValue(text, 'outbox_in_flight_lanes')).toBe(0)
      expect(metricValue(text, 'outbox_struggling_lanes')).toBe(0)
      expect(text).toMatch(
        /^# HELP outbox_pending Deprecated \(removed in 0\.3\.0\): use outbox_pending_events\./m,
      )
      // Every request timed apart from enqueue-to-2xx latency: 4 answered 2xx, 2 answered 500, 1 answered 409.
      const duration = (outcome: string) =>
        metricValue(
          text,
          'outbox_request_duration_seconds_count',
          `{subscription="default",outcome="${outcome}"}`,
        )
      expect([duration('success'), duration('failure'), duration('conflict')]).toEqual([4, 2, 1])
      expect(
        metricValue(
          text,
          'outbox_request_duration_seconds_sum',
          '{subscription="default",outcome="success"}',
        ),
      ).toBeGreaterThan(0)
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

  it('labels at most subscriptionLabels.max subscriptions by name, the rest "other"; "none" labels every one "all"', async () => {
    const sinks = [await startSink(), await startSink(), await startSink()]
    await storeSubscriptions(t.db, {
      'cap-a': { url: sinks[0]!.url },
      'cap-b': { url: sinks[1]!.url },
      'cap-c': { url: sinks[2]!.url },
    })
    try {
      await seedEvents(t.db, ['cap-1'], 1)
      const capped = new Registry()
      const none = new Registry()
      for (const [register, subscriptionLabels] of [
        [capped, { max: 1 }],
        [none, 'none'],
      ] as const) {
        await new Relay({
          db: t.db,
          allowPrivateNetworks: true,
          metrics: { register, subscriptionLabels },
          logger: silentLogger,
        }).runOnce()
        await seedEvents(t.db, ['cap-2'], 1)
      }
      const cappedText = await capped.metrics()
      const names = [...cappedText.matchAll(/^outbox_deliveries_total\{subscription="([^"]+)"/gm)].map(
        (m) => m[1],
      )
      expect(names).toHaveLength(2)
      expect(names).toContain('other')
      expect(names.filter((name) => name !== 'other')[0]).toMatch(/^cap-[abc]$/)
      expect(
        metricValue(
          cappedText,
          'outbox_deliveries_total',
          '{subscription="other",outcome="success",status="200"}',
        ),
      ).toBe(2)
      expect(
        metricValue(
          await none.metrics(),
          'outbox_deliveries_total',
          '{subscription="all",outcome="success",status="200"}',
        ),
      ).toBe(3)
      expect(
        () =>
          new Relay({
            db: t.db,
            endpoint: 'http://127.0.0.1:9/h',
            metrics: { register: capped, subscriptionLabels: { max: -1 } },
          }),
      ).toThrow(/metrics\.subscriptionLabels must be 'all', 'none' or \{ max: <integer ≥ 0> \}/)
    } finally {
      for (const sink of sinks) await sink.close()
      await sql`DELETE FROM outbox_subscription WHERE name LIKE 'cap-%'`.execute(t.db)
      await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE name = 'default'`.execute(t.db)
    }
  })

  it('counts relay errors by what failed and lane takeovers by whether the head was charged', async () => {
    const register = new Registry()
    const failing = new Relay({
      db: t.db,
      endpoint: 'http://127.0.0.1:9/hooks',
      schema: 'no_such_schema',
      pollIntervalMs: 10,
      metrics: { register },
      logger: silentLogger,
    })
    await failing.start()
    await waitFor(
      async () =>
        (metricValue(await register.metrics(), 'outbox_relay_errors_total', '{during="claim"}') ?? 0) >= 2,
      'two claim errors counted',
    )
    await failing.stop()

    await seedEvents(t.db, ['tk-free', 'tk-charged'], 1)
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() - interval '1 second' WHERE aggregate_id LIKE 'tk-%'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET watch_starts = true, started_token = claim_token WHERE aggregate_id = 'tk-charged'`.execute(
      t.db,
    )
    const sink = await startSink()
    const takeovers = new Registry()
    try {
      await new Relay({
        db: t.db,
        endpoint: sink.url,
        metrics: { register: takeovers },
        logger: silentLogger,
      }).runOnce()
    } finally {
      await sink.close()
    }
    const text = await takeovers.metrics()
    expect(metricValue(text, 'outbox_lane_takeovers_total', '{subscription="default",charged="false"}')).toBe(
      1,
    )
    expect(metricValue(text, 'outbox_lane_takeovers_total', '{subscription="default",charged="true"}')).toBe(
      1,
    )
  })

  it('refuses a metrics option without a registry', () => {
    expect(() => new Relay({ db: t.db, endpoint: 'http://127.0.0.1:9/h', metrics: {} as never })).toThrow(
      /prom-client Registry/,
    )
  })
})
