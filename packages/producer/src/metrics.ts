import type { MetricsRegistry } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import { AUTO_DISABLE_REASONS } from './auto-disable.js'
import type { RelayEvents } from './events.js'
import type { OutboxStats, StatsFigures } from './stats.js'
import { stats } from './stats.js'
import { registerSubscriptionGauges } from './subscription-gauges.js'
import { SubscriptionLabeler } from './subscription-labeler.js'

export type { MetricsRegistry }

/**
 * Which `subscription` label values the metrics use: every subscription's own (`'all'`), none (`'none'`: every
 * series is labelled `subscription="all"`), or those of the first `max` subscriptions seen with the rest labelled
 * `other` (`{ max }`), so a relay serving thousands of tenants' subscriptions does not create thousands of series per
 * metric. The delivery counters and histograms are labelled by name; the per-subscription gauges
 * (`outbox_subscription_*`) by id, so no tenant's name reaches them; each kind is capped on its own.
 */
export type SubscriptionLabels = 'all' | 'none' | { readonly max: number }

/** Options of the relay's Prometheus metrics. */
export interface MetricsOptions {
  /** The prom-client registry to register the metrics on. */
  readonly register: MetricsRegistry
  /** Prefix of every metric name. @defaultValue 'outbox_' */
  readonly prefix?: string
  /** How subscriptions are labelled (cardinality). @defaultValue { max: 50 } */
  readonly subscriptionLabels?: SubscriptionLabels
}

/** Subscriptions labelled by name before the rest share `subscription="other"`. */
export const DEFAULT_SUBSCRIPTION_LABELS: SubscriptionLabels = Object.freeze({ max: 50 })

/** Latency buckets (seconds) from enqueue to 2xx: LISTEN wake-ups land in the first ones, retries in the last. */
export const LATENCY_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200,
]

/** Buckets (seconds) of one webhook request's duration: a loopback answer to the default 10 s timeout and beyond. */
export const REQUEST_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** How one stats read serves every gauge of a scrape. */
const STATS_CACHE_MS = 1000

type PromClient = typeof import('prom-client')

interface Counter {
  inc(labels: Record<string, string>, value?: number): void
}
interface Histogram {
  observe(labels: Record<string, string>, value: number): void
}

/**
 * The gauges read from {@link stats}: the figure, the name (saying what it counts: events or lanes), and the name
 * it had before 0.2.0, still registered (with the same value) until 0.3.0 so dashboards and alerts can move.
 */
const GAUGES: readonly [keyof StatsFigures, string, string | undefined, string][] = [
  ['lagSeconds', 'lag_seconds', undefined, 'Age in seconds of the oldest undelivered event.'],
  ['pending', 'pending_events', 'pending', 'Events not yet delivered.'],
  ['inFlight', 'in_flight_lanes', 'in_flight', 'Lanes held under a live lease.'],
  ['struggling', 'struggling_lanes', 'struggling', 'Lanes whose head has 3 or more failed attempts.'],
  [
    'suspect',
    'suspect_lanes',
    undefined,
    'Lanes whose head relays died sending, as often as its attempts allow.',
  ],
  ['dead', 'dead_letter_events', 'dead', 'Dead-lettered events.'],
  ['blocked', 'blocked_lanes', 'blocked', "Lanes parked by a 409 or by onExhausted: 'block'."],
]

/**
 * The relay's Prometheus metrics on a registry the user owns: counters of deliveries by subscription, outcome and
 * HTTP status, of relay errors, of lane takeovers and of subscriptions the relay disabled by itself (by reason); a
 * histogram of request durations and one of enqueue-to-2xx latency; and gauges read from {@link stats} at scrape
 * time — of the whole outbox, of disabled subscriptions by reason, and of each subscription (pending, oldest due age,
 * in flight, breaker) — where one query serves a whole scrape; a failed read keeps the last values and counts
 * `outbox_relay_errors_total{during="stats"}` instead of failing the scrape.
 *
 * The counters' and histograms' `subscription` label is the subscription's name (`default` for the implicit one, the
 * id for a stored one without a name); the per-subscription gauges' is its id (the nil uuid for the implicit one).
 * Both are capped by `subscriptionLabels` (default: the first 50 seen, then `other`).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { Registry } from 'prom-client'
 * import { Relay } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const register = new Registry()
 * const relay = new Relay({ db, metrics: { register, subscriptionLabels: { max: 20 } } })
 * ```
 */
export class RelayMetrics {
  private constructor(
    private readonly deliveries: Counter,
    private readonly latency: Histogram,
    private readonly transitions: Counter,
    private readonly errors: Counter,
    private readonly takeovers: Counter,
    private readonly durations: Histogram,
    private readonly autoDisables: Counter,
    private readonly labels: SubscriptionLabeler,
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
    const counter = (name: string, help: string, labelNames: string[]) =>
      existing<Counter>(name) ??
      new client.Counter({ name: `${prefix}${name}`, help, labelNames, registers: [register] })
    const histogram = (name: string, help: string, labelNames: string[], buckets: number[]) =>
      existing<Histogram>(name) ??
      new client.Histogram({ name: `${prefix}${name}`, help, labelNames, buckets, registers: [register] })

    const deliveries = counter(
      'deliveries_total',
      'Webhook requests by subscription (its name), outcome (success, retry, dead, conflict) and HTTP status ("none" for timeouts and network errors).',
      ['subscription', 'outcome', 'status'],
    )
    const latency = histogram(
      'delivery_latency_seconds',
      'Seconds from the enqueueing transaction to the 2xx answer, by subscription (its name).',
      ['subscription'],
      LATENCY_BUCKETS,
    )
    const durations = histogram(
      'request_duration_seconds',
      'Seconds one webhook request took, from sending to the end of the answer, by subscription and outcome (success, failure, conflict, aborted).',
      ['subscription', 'outcome'],
      REQUEST_DURATION_BUCKETS,
    )
    const transitions = counter(
      'endpoint_transitions_total',
      'Endpoint breaker transitions this relay made, by subscription (its name) and state entered (open, probing, closed).',
      ['subscription', 'to'],
    )
    const errors = counter(
      'relay_errors_total',
      'Failures outside one delivery, by what the relay was doing (claim, flush, outcome, listen, stats); the relay retries them.',
      ['during'],
    )
    const takeovers = counter(
      'lane_takeovers_total',
      'Lanes this relay claimed after another claim expired without an outcome (a relay died or hung), by subscription and whether the head was charged an attempt.',
      ['subscription', 'charged'],
    )
    const autoDisables = counter(
      'subscription_auto_disables_total',
      'Stored subscriptions this relay disabled by itself, by reason (gone: the endpoint answered 410 Gone). outbox_disabled_subscriptions counts those still disabled.',
      ['reason'],
    )
    // Every reason's series exists from the start at 0, so increase() sees the first auto-disable.
    for (const reason of AUTO_DISABLE_REASONS) autoDisables.inc({ reason }, 0)
    let cached: { at: number; value: Promise<OutboxStats> } | undefined
    const read = () => {
      if (!cached || performance.now() - cached.at > STATS_CACHE_MS) {
        const value = stats(db, { schema })
        value.catch(() => {
          cached = undefined
          errors.inc({ during: 'stats' })
        })
        cached = { at: performance.now(), value }
      }
      return cached.value
    }
    // A stats read that fails (the database is down or slow) keeps the gauges' last values instead of failing the
    // whole scrape: the counters, the process metrics and the relay's readiness must still reach Prometheus then.
    const readOrKeep = () => read().catch(() => undefined)
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
    for (const [key, name, oldName, help] of GAUGES) {
      for (const [each, text] of [
        [name, help],
        [oldName, `Deprecated (removed in 0.3.0): use ${prefix}${name}. ${help}`],
      ] as const) {
        if (each === undefined || existing(each)) continue
        new client.Gauge({
          name: `${prefix}${each}`,
          help: text,
          registers: [register],
          async collect() {
            const figures = await readOrKeep()
            if (figures) this.set(figures[key])
          },
        })
      }
    }
    const policy = options.subscriptionLabels ?? DEFAULT_SUBSCRIPTION_LABELS
    registerSubscriptionGauges({
      gauge: (name, help, labelNames, collect) => {
        if (existing(name)) return
        new client.Gauge({
          name: `${prefix}${name}`,
          help,
          labelNames,
          registers: [register],
          async collect() {
            const figures = await readOrKeep()
            if (figures) {
              this.reset()
              for (const [labels, value] of collect(figures)) this.set(labels, value)
            }
          },
        })
      },
      labels: new SubscriptionLabeler(policy),
    })
    const labels = new SubscriptionLabeler(policy)
    return new RelayMetrics(
      deliveries,
      latency,
      transitions,
      errors,
      takeovers,
      durations,
      autoDisables,
      labels,
    )
  }

  /** Feeds the counters and the histograms from a relay's own events. */
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
    events.on('request:finished', (event) =>
      this.durations.observe(
        { subscription: this.labels.label(event.subscriptionName), outcome: event.outcome },
        event.durationMs / 1000,
      ),
    )
    events.on('lane:takeover', (event) =>
      this.takeovers.inc({
        subscription: this.labels.label(event.subscriptionName),
        charged: String(event.charged),
      }),
    )
    events.on('relay:error', (event) => this.errors.inc({ during: event.during }))
    events.on('subscription:disabled', (event) => this.autoDisables.inc({ reason: event.reason }))
    const transition = (name: string, to: string) =>
      this.transitions.inc({ subscription: this.labels.label(name), to })
    events.on('endpoint:opened', (event) => transition(event.name, 'open'))
    events.on('endpoint:probing', (event) => transition(event.name, 'probing'))
    events.on('endpoint:closed', (event) => transition(event.name, 'closed'))
  }

  /** Counts one request's outcome for a subscription (its name). */
  count(
    subscription: string,
    outcome: 'success' | 'retry' | 'dead' | 'conflict',
    httpStatus: number | null,
  ): void {
    this.deliveries.inc({
      subscription: this.labels.label(subscription),
      outcome,
      status: httpStatus === null ? 'none' : String(httpStatus),
    })
  }

  /** Records enqueue-to-2xx latency for a subscription (its name). */
  observeLatency(subscription: string, ms: number): void {
    this.latency.observe({ subscription: this.labels.label(subscription) }, ms / 1000)
  }
}
