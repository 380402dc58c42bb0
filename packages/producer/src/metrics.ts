import type { MetricsRegistry } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { RelayEvents } from './events.js'
import type { OutboxStats, StatsFigures } from './stats.js'
import { stats } from './stats.js'

export type { MetricsRegistry }

/** Options of the relay's Prometheus metrics. */
export interface MetricsOptions {
  /** The prom-client registry to register the metrics on. */
  readonly register: MetricsRegistry
  /** Prefix of every metric name. @defaultValue 'outbox_' */
  readonly prefix?: string
}

/** Latency buckets (seconds) from enqueue to 2xx: LISTEN wake-ups land in the first ones, retries in the last. */
export const LATENCY_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200,
]

/** How long one stats read serves every gauge of a scrape. */
const STATS_CACHE_MS = 1000

type PromClient = typeof import('prom-client')

interface Counter {
  inc(labels: Record<string, string>, value?: number): void
}
interface Histogram {
  observe(labels: Record<string, string>, value: number): void
}

/**
 * The relay's Prometheus metrics on a registry the user owns: counters of deliveries by subscription, outcome and
 * HTTP status, a latency histogram by subscription, and gauges of the whole outbox read from {@link stats} at
 * scrape time (one query serves a whole scrape). prom-client is an optional peer dependency, loaded only when
 * metrics are asked for.
 *
 * The `subscription` label is the subscription's name (`default` for the implicit one, the id for a stored one
 * without a name): its values are bounded by the number of subscriptions the relay serves, never by events or
 * aggregates. Deleting and recreating subscriptions under new names adds series, as any label would.
 */
export class RelayMetrics {
  private constructor(
    private readonly deliveries: Counter,
    private readonly latency: Histogram,
    private readonly transitions: Counter,
  ) {}

  /** Creates (or reuses, when a relay is created twice on one registry) the metrics. */
  static async create(options: MetricsOptions, db: Kysely<any>, schema: string): Promise<RelayMetrics> {
    let client: PromClient
    try {
      client = await import('prom-client')
    } catch (error) {
      throw new Error('metrics need the prom-client package: npm install prom-client', { cause: error })
    }
    const prefix = options.prefix ?? 'outbox_'
    const register = options.register as InstanceType<PromClient['Registry']>
    const existing = <T>(name: string) => register.getSingleMetric(`${prefix}${name}`) as T | undefined

    const deliveries =
      existing<Counter>('deliveries_total') ??
      new client.Counter({
        name: `${prefix}deliveries_total`,
        help: 'Webhook requests by subscription (its name), outcome (success, retry, dead, conflict) and HTTP status ("none" for timeouts and network errors).',
        labelNames: ['subscription', 'outcome', 'status'],
        registers: [register],
      })
    const latency =
      existing<Histogram>('delivery_latency_seconds') ??
      new client.Histogram({
        name: `${prefix}delivery_latency_seconds`,
        help: 'Seconds from the enqueueing transaction to the 2xx answer, by subscription (its name).',
        labelNames: ['subscription'],
        buckets: LATENCY_BUCKETS,
        registers: [register],
      })

    const transitions =
      existing<Counter>('endpoint_transitions_total') ??
      new client.Counter({
        name: `${prefix}endpoint_transitions_total`,
        help: 'Endpoint breaker transitions this relay made, by subscription (its name) and state entered (open, probing, closed).',
        labelNames: ['subscription', 'to'],
        registers: [register],
      })
    let cached: { at: number; value: Promise<OutboxStats> } | undefined
    const read = () => {
      if (!cached || performance.now() - cached.at > STATS_CACHE_MS) {
        const value = stats(db, { schema })
        value.catch(() => {
          cached = undefined
        })
        cached = { at: performance.now(), value }
      }
      return cached.value
    }
    // A stats read that fails (the database is down or slow) keeps the gauges' last values instead of failing the
    // whole scrape: the counters, the process metrics and the relay's readiness must still reach Prometheus then.
    const readOrKeep = () => read().catch(() => undefined)
    const gauges: [keyof StatsFigures, string, string][] = [
      ['lagSeconds', 'lag_seconds', 'Age in seconds of the oldest undelivered event.'],
      ['pending', 'pending', 'Events not yet delivered.'],
      ['inFlight', 'in_flight', 'Lanes held under a live lease.'],
      ['struggling', 'struggling', 'Lane heads with 3 or more failed attempts.'],
      ['dead', 'dead', 'Dead-lettered events.'],
      ['blocked', 'blocked', "Lanes parked by a 409 or by onExhausted: 'block'."],
    ]
    if (!existing('endpoints_open')) {
      new client.Gauge({
        name: `${prefix}endpoints_open`,
        help: 'Stored subscriptions whose endpoint breaker is open or probing.',
        registers: [register],
        async collect() {
          const figures = await readOrKeep()
          if (figures) this.set(figures.subscriptions.filter((sub) => sub.breaker !== 'closed').length)
        },
      })
    }
    for (const [key, name, help] of gauges) {
      if (existing(name)) continue
      new client.Gauge({
        name: `${prefix}${name}`,
        help,
        registers: [register],
        async collect() {
          const figures = await readOrKeep()
          if (figures) this.set(figures[key])
        },
      })
    }
    return new RelayMetrics(deliveries, latency, transitions)
  }

  /** Feeds the counters and the histogram from a relay's own events. */
  attach(events: RelayEvents): void {
    events.on('delivery:success', (event) => {
      this.count(event.subscriptionName, 'success', event.httpStatus)
      this.observeLatency(event.subscriptionName, event.latencyMs)
    })
    events.on('delivery:retry', (event) => this.count(event.subscriptionName, 'retry', event.httpStatus))
    events.on('delivery:dead', (event) => this.count(event.subscriptionName, 'dead', event.httpStatus))
    events.on('lane:blocked', (event) => {
      if (event.reason === 'conflict') this.count(event.subscriptionName, 'conflict', 409)
    })
    events.on('endpoint:opened', (event) => this.transitions.inc({ subscription: event.name, to: 'open' }))
    events.on('endpoint:probing', (event) =>
      this.transitions.inc({ subscription: event.name, to: 'probing' }),
    )
    events.on('endpoint:closed', (event) => this.transitions.inc({ subscription: event.name, to: 'closed' }))
  }

  /** Counts one request's outcome for a subscription (its name). */
  count(
    subscription: string,
    outcome: 'success' | 'retry' | 'dead' | 'conflict',
    httpStatus: number | null,
  ): void {
    this.deliveries.inc({ subscription, outcome, status: httpStatus === null ? 'none' : String(httpStatus) })
  }

  /** Records enqueue-to-2xx latency for a subscription (its name). */
  observeLatency(subscription: string, ms: number): void {
    this.latency.observe({ subscription }, ms / 1000)
  }
}
