import type { MetricsRegistry } from '@outbox/protocol'
import type { Consumer } from './consumer.js'
import type { ReceiptEventMap } from './receipt-events.js'

/** Options of {@link consumerMetrics}. */
export interface ConsumerMetricsOptions {
  /** The prom-client registry the metrics are registered on. */
  readonly register: MetricsRegistry
  /** Prefix of every metric name. @defaultValue 'outbox_consumer_' */
  readonly prefix?: string
}

/** What {@link consumerMetrics} returns: `stop()` detaches the metrics from the consumer's events. */
export interface ConsumerMetrics {
  /** Stops counting this consumer's receipts (the metrics stay registered, with what they counted). */
  stop(): void
}

/**
 * Seconds buckets of both histograms: a handler's own time and a whole request's, from a cached duplicate (well
 * under a millisecond beyond the round trip) to a handler stuck on a lock.
 */
export const RECEIPT_DURATION_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
]

type PromClient = typeof import('prom-client')
interface Counter {
  inc(labels: Record<string, string>): void
}
interface Histogram {
  observe(labels: Record<string, string>, value: number): void
}

/** The outcome label of each receipt event. */
const OUTCOMES = {
  'receipt:applied': 'applied',
  'receipt:duplicate': 'duplicate',
  'receipt:stale': 'stale',
  'receipt:refused': 'refused',
  'receipt:failed': 'failed',
} as const satisfies Record<keyof ReceiptEventMap, string>

/** The `code` label: the answer's code — a delivery status for 2xx, a problem code otherwise. */
const DELIVERED_CODES = {
  'receipt:applied': 'applied',
  'receipt:duplicate': 'duplicate_ignored',
  'receipt:stale': 'stale_ignored',
} as const

/**
 * Prometheus metrics of a consumer on a registry the application owns, fed by its `receipt:*` events:
 *
 * - `outbox_consumer_receipts_total{source, outcome, code}` — every answered request: `outcome` is `applied`,
 *   `duplicate`, `stale`, `refused` (4xx) or `failed` (5xx), `code` the answer's code (`applied`,
 *   `duplicate_ignored`, `stale_ignored` or the problem code, e.g. `invalid_signature`, `sequence_gap`).
 * - `outbox_consumer_handler_duration_seconds{source}` — the application's handler, for applied events.
 * - `outbox_consumer_request_duration_seconds{source, outcome}` — arrival to answer, every request.
 * - `outbox_consumer_payload_mismatches_total{source}` — duplicates whose id was recorded with another payload
 *   (see `receipt:duplicate`'s `payloadMismatch`): an id reused for another event, not applied.
 *
 * Label values are bounded: sources are configured, outcomes and codes are fixed lists. prom-client is an
 * optional peer dependency, loaded only here. Several consumers may share one registry (their `source` labels
 * tell them apart); calling it twice on one registry reuses the metrics.
 *
 * @example
 * ```ts
 * import { consumerMetrics, createConsumer, createPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import { Registry } from 'prom-client'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * const register = new Registry()
 * await consumerMetrics(consumer, { register })
 * // serve `await register.metrics()` on GET /metrics
 * ```
 */
export async function consumerMetrics(
  consumer: Pick<Consumer, 'on'>,
  options: ConsumerMetricsOptions,
): Promise<ConsumerMetrics> {
  let client: PromClient
  try {
    client = await import('prom-client')
  } catch (error) {
    throw new Error('consumer metrics need the prom-client package: npm install prom-client', {
      cause: error,
    })
  }
  const prefix = options.prefix ?? 'outbox_consumer_'
  const register = options.register as InstanceType<PromClient['Registry']>
  const existing = <T>(name: string) => register.getSingleMetric(`${prefix}${name}`) as T | undefined

  const receipts =
    existing<Counter>('receipts_total') ??
    new client.Counter({
      name: `${prefix}receipts_total`,
      help: 'Webhook requests answered, by source, outcome (applied, duplicate, stale, refused, failed) and code.',
      labelNames: ['source', 'outcome', 'code'],
      registers: [register],
    })
  const handlerDuration =
    existing<Histogram>('handler_duration_seconds') ??
    new client.Histogram({
      name: `${prefix}handler_duration_seconds`,
      help: "Seconds the application's handler ran, for applied events.",
      labelNames: ['source'],
      buckets: RECEIPT_DURATION_BUCKETS,
      registers: [register],
    })
  const requestDuration =
    existing<Histogram>('request_duration_seconds') ??
    new client.Histogram({
      name: `${prefix}request_duration_seconds`,
      help: 'Seconds from the arrival of a webhook request to its answer, by source and outcome.',
      labelNames: ['source', 'outcome'],
      buckets: RECEIPT_DURATION_BUCKETS,
      registers: [register],
    })

  const mismatches =
    existing<Counter>('payload_mismatches_total') ??
    new client.Counter({
      name: `${prefix}payload_mismatches_total`,
      help: 'Duplicate event ids whose payload differed from the recorded one (answered duplicate_ignored, not applied).',
      labelNames: ['source'],
      registers: [register],
    })

  const detach: (() => void)[] = []
  for (const name of Object.keys(OUTCOMES) as (keyof ReceiptEventMap)[]) {
    const outcome = OUTCOMES[name]
    detach.push(
      consumer.on(name, (receipt: ReceiptEventMap[keyof ReceiptEventMap]) => {
        const code = 'code' in receipt ? receipt.code : DELIVERED_CODES[name as keyof typeof DELIVERED_CODES]
        receipts.inc({ source: receipt.source, outcome, code })
        requestDuration.observe({ source: receipt.source, outcome }, receipt.durationMs / 1000)
        if ('handlerMs' in receipt)
          handlerDuration.observe({ source: receipt.source }, receipt.handlerMs / 1000)
        if ('payloadMismatch' in receipt && receipt.payloadMismatch)
          mismatches.inc({ source: receipt.source })
      }),
    )
  }
  return Object.freeze({
    stop() {
      for (const off of detach.splice(0)) off()
    },
  })
}
