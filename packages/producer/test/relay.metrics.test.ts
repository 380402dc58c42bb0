import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { disableSubscription, Relay, silentLogger, stats } from '../src/index.js'
import { metricValue, seedEvents, storeSubscriptions, waitFor } from './support.js'

const t = useTestDatabase()

/**
 * A relay whose metrics read the outbox while it delivers nothing: it serves the implicit subscription alone (on an
 * address nothing listens on), which these tests keep disabled and empty.
 */
function quietRelay(register: Registry, subscriptionLabels?: { max: number }): Relay {
  return new Relay({
    db: t.db,
    endpoint: 'http://127.0.0.1:9/nothing',
    metrics: { register, ...(subscriptionLabels ? { subscriptionLabels } : {}) },
    logger: silentLogger,
  })
}

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
      expect(metricValue(text, 'outbox_suspect_lanes')).toBe(0)
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

  it('counts a 410 auto-disable by reason, and reports disabled subscriptions by reason from PostgreSQL after a restart', async () => {
    const gone = await startSink(() => ({ status: 410 }))
    const ids = await storeSubscriptions(t.db, {
      'ad-gone': { url: gone.url },
      'ad-paused': { url: 'http://127.0.0.1:9/ad-paused' },
    })
    try {
      await disableSubscription(t.db, ids['ad-paused']!, { reason: 'customer asked; ticket 4711' })
      await seedEvents(t.db, ['ad-1'], 2)
      const register = new Registry()
      const relay = new Relay({
        db: t.db,
        allowPrivateNetworks: true,
        metrics: { register },
        logger: silentLogger,
      })
      await relay.runOnce()
      await relay.stop()
      const text = await register.metrics()
      expect(metricValue(text, 'outbox_subscription_auto_disables_total', '{reason="gone"}')).toBe(1)
      expect(metricValue(text, 'outbox_disabled_subscriptions', '{reason="gone"}')).toBe(1)
      // The operator's reason is free text: counted as "operator", never a label value.
      expect(metricValue(text, 'outbox_disabled_subscriptions', '{reason="operator"}')).toBe(1)
      expect(text).not.toContain('ticket 4711')

      // A relay started afresh has counted nothing (the series is there at 0, so increase() sees the next one), and
      // still reports what PostgreSQL holds.
      const restarted = new Registry()
      await quietRelay(restarted).runOnce()
      const after = await restarted.metrics()
      expect(metricValue(after, 'outbox_subscription_auto_disables_total', '{reason="gone"}')).toBe(0)
      expect(metricValue(after, 'outbox_disabled_subscriptions', '{reason="gone"}')).toBe(1)
    } finally {
      await gone.close()
      await sql`DELETE FROM outbox_subscription WHERE name LIKE 'ad-%'`.execute(t.db)
      await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE name = 'default'`.execute(t.db)
    }
  })

  it('reports per-subscription gauges by subscription id (pending, oldest due age, in flight, breaker), capped like the other labels', async () => {
    const ok = await startSink()
    const failing = await startSink(() => ({ status: 500 }))
    const ids = await storeSubscriptions(t.db, {
      'tenant-ok': { url: ok.url },
      'tenant-failing': { url: failing.url },
    })
    try {
      await seedEvents(t.db, ['pg-1', 'pg-2'], 2)
      const register = new Registry()
      const relay = new Relay({
        db: t.db,
        allowPrivateNetworks: true,
        retrySchedule: [3_600_000],
        metrics: { register },
        logger: silentLogger,
      })
      await relay.runOnce()
      await relay.stop()
      // tenant-ok: delivered, then three more events, enqueued 10 minutes ago and not yet sent, one lane of them
      // under a live lease. tenant-failing: its heads wait an hour in backoff (nothing due), its breaker open.
      await seedEvents(t.db, ['pg-3', 'pg-4', 'pg-5'], 1)
      await sql`UPDATE outbox SET created_at = now() - interval '600 seconds'
        WHERE subscription_id = ${ids['tenant-ok']}::uuid AND status = 'pending'`.execute(t.db)
      await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
        WHERE subscription_id = ${ids['tenant-ok']}::uuid AND aggregate_id = 'pg-3'`.execute(t.db)
      await sql`DELETE FROM outbox WHERE subscription_id = ${ids['tenant-failing']}::uuid AND aggregate_id LIKE 'pg-_'
        AND aggregate_id > 'pg-2'`.execute(t.db)
      await sql`UPDATE outbox_subscription SET breaker_state = 'open', breaker_opened_at = now(),
          probe_at = now() + interval '1 hour' WHERE id = ${ids['tenant-failing']}::uuid`.execute(t.db)

      const text = await register.metrics()
      const gauge = (name: string, id: string) => metricValue(text, name, `{subscription="${id}"}`)
      const okId = ids['tenant-ok']!
      const failingId = ids['tenant-failing']!
      const snapshot = await stats(t.db)
      const share = (id: string) => snapshot.subscriptions.find((sub) => sub.id === id)!
      expect(share(okId)).toMatchObject({ pending: 3, inFlight: 1, breaker: 'closed' })
      expect(share(failingId)).toMatchObject({
        pending: 4,
        inFlight: 0,
        breaker: 'open',
        oldestDueSeconds: 0,
      })
      expect(gauge('outbox_subscription_pending_events', okId)).toBe(3)
      expect(gauge('outbox_subscription_pending_events', failingId)).toBe(4)
      expect(gauge('outbox_subscription_in_flight_lanes', okId)).toBe(1)
      expect(gauge('outbox_subscription_in_flight_lanes', failingId)).toBe(0)
      expect(gauge('outbox_subscription_breaker_open', okId)).toBe(0)
      expect(gauge('outbox_subscription_breaker_open', failingId)).toBe(1)
      expect(gauge('outbox_subscription_oldest_due_seconds', okId)).toBeGreaterThanOrEqual(600)
      expect(gauge('outbox_subscription_oldest_due_seconds', okId)).toBeLessThan(660)
      // Pending, but every one in backoff: nothing due.
      expect(gauge('outbox_subscription_oldest_due_seconds', failingId)).toBe(0)
      // Ids, never names: a name may be a tenant's.
      const perSubscription = text.split('\n').filter((line) => line.startsWith('outbox_subscription_'))
      expect(perSubscription.join('\n')).not.toMatch(/tenant-/)

      // Under a cap of one, the second subscription seen folds into "other" (sums; the oldest due age: the largest).
      const capped = new Registry()
      await quietRelay(capped, { max: 1 }).runOnce()
      const cappedText = await capped.metrics()
      const labels = [
        ...cappedText.matchAll(/^outbox_subscription_pending_events\{subscription="([^"]+)"\} (\d+)/gm),
      ].map((match) => [match[1], Number(match[2])])
      expect(labels).toHaveLength(2)
      expect(labels.map(([label]) => label)).toContain('other')
      expect(labels.reduce((sum, [, value]) => sum + (value as number), 0)).toBe(
        snapshot.subscriptions.reduce((sum, sub) => sum + sub.pending, 0),
      )
    } finally {
      await ok.close()
      await failing.close()
      await sql`DELETE FROM outbox_subscription WHERE name LIKE 'tenant-%'`.execute(t.db)
      await sql`DELETE FROM outbox WHERE aggregate_id LIKE 'pg-%'`.execute(t.db)
      await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE name = 'default'`.execute(t.db)
    }
  })

  it('refuses a metrics option without a registry', () => {
    expect(() => new Relay({ db: t.db, endpoint: 'http://127.0.0.1:9/h', metrics: {} as never })).toThrow(
      /prom-client Registry/,
    )
  })
})
