/**
 * The relay: delivers the orders service's outbox to the subscriber as signed webhooks — one order's events
 * in sequence order, different orders in parallel, failures retried on a schedule. It runs apart from the
 * orders service (a deploy of one never stalls the other) and as many copies as you like: each order's lane
 * is held by one relay at a time.
 *
 * Run it alone:
 *   DATABASE_URL=postgres://…/orders SUBSCRIBER_URL=http://127.0.0.1:3001/hooks OUTBOX_SECRET=whsec_… \
 *     METRICS_PORT=9464 pnpm --filter @outbox/example-orders relay
 */
import {
  type EndpointBreakerOptions,
  type Logger,
  type MetricsOptions,
  migrate,
  Relay,
} from '@outbox/producer'
import type { Kysely } from 'kysely'
import { Registry } from 'prom-client'
import { connect } from './database.js'
import { portFromEnv, requireEnv } from './env.js'
import { serve } from './serve.js'
import { isMain, stopOnSignal } from './shutdown.js'

/** What {@link createRelay} needs. */
export interface RelaySettings {
  /** The orders service's database (the relay reads and updates its outbox tables). */
  readonly db: Kysely<any>
  /**
   * The same database as a connection string, for the LISTEN connection (straight to PostgreSQL, no pooler).
   */
  readonly databaseUrl: string
  /**
   * The subscriber's webhook URL: the relay then serves the implicit subscription only. Without it, the relay
   * serves every enabled stored subscription (`createSubscription`), each with its own URL and secret.
   */
  readonly endpoint?: string
  /** Standard Webhooks secret(s), `whsec_…`, with `endpoint` only: the subscriber must hold the same. */
  readonly secret?: string | readonly string[]
  /**
   * Let stored subscriptions' URLs reach loopback and private addresses (the demo's subscribers listen on
   * 127.0.0.1). Their URLs are refused there by default, as they may come from customers. @defaultValue false
   */
  readonly allowPrivateNetworks?: boolean
  /** Delays between attempts in ms. @defaultValue the library's: 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h */
  readonly retrySchedule?: readonly number[]
  /** Orders (lanes) delivered in parallel, one request each at a time. @defaultValue 16 */
  readonly concurrency?: number
  /** How often an idle relay looks for due work; NOTIFY wakes it sooner. @defaultValue 200 */
  readonly pollIntervalMs?: number
  /**
   * Stored subscriptions' endpoint breaker (failures in a row pause an endpoint until a probe answers), or false.
   * @defaultValue the library's: 10 failures, then probes after 10 s, doubling to 10 min
   */
  readonly endpointBreaker?: EndpointBreakerOptions | false
  /** Prometheus metrics on your prom-client registry. @defaultValue off */
  readonly metrics?: MetricsOptions
  /** @defaultValue warnings and errors to the console */
  readonly logger?: Logger
}

/** Creates the relay, not yet started: `await relay.start()`, and `await relay.stop()` on the way out. */
export function createRelay({
  db,
  databaseUrl,
  endpoint,
  secret,
  allowPrivateNetworks,
  retrySchedule,
  concurrency,
  pollIntervalMs,
  endpointBreaker,
  metrics,
  logger,
}: RelaySettings): Relay {
  // #region relay
  const relay = new Relay({
    db, // the orders service's database: the outbox lives there
    endpoint, // the subscriber's webhook URL; undefined: every stored subscription (createSubscription)
    secret, // whsec_…: the subscriber verifies every request with the same secret (stored ones have their own)
    allowPrivateNetworks, // true: stored subscriptions' URLs may be on loopback or a private network
    // Wake up at the NOTIFY each enqueue sends instead of at the next poll (polling stays, as the safety
    // net). LISTEN needs a session of its own: PostgreSQL itself, not a transaction-mode pooler.
    listen: { connectionString: databaseUrl },
    retrySchedule, // undefined: 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h, then dead letter
    concurrency, // undefined: 16 orders at a time, each with one request in flight
    pollIntervalMs,
    endpointBreaker, // undefined: an endpoint failing 20 times in a row is paused until a probe answers
    metrics, // { register }: Prometheus metrics on your prom-client registry
    logger, // pino or anything with its four methods; undefined: warnings and errors to the console
  })
  // #endregion relay
  return relay
}

async function main(): Promise<void> {
  const databaseUrl = requireEnv('DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/orders')
  const db = connect(databaseUrl)
  const register = new Registry()
  const endpoint = process.env.SUBSCRIBER_URL || 'http://127.0.0.1:3001/hooks'
  let relay: Relay
  try {
    // Idempotent and safe next to the orders service's own call: whichever starts first creates the tables.
    await migrate(db)
    relay = createRelay({
      db,
      databaseUrl,
      endpoint,
      secret: process.env.OUTBOX_SECRET || undefined,
      metrics: { register },
    })
    await relay.start()
  } catch (error) {
    await db.destroy()
    throw error
  }
  console.log(`relay: delivering to ${endpoint}`)

  // Prometheus scrapes GET /metrics: deliveries by outcome, latency, and the outbox's stats as gauges.
  const metricsPort = portFromEnv('METRICS_PORT', -1)
  const metrics =
    metricsPort < 0
      ? undefined
      : await serve(async (req, res) => {
          if (req.url !== '/metrics') {
            res.writeHead(404).end()
            return
          }
          res.writeHead(200, { 'content-type': register.contentType }).end(await register.metrics())
        }, metricsPort)
  if (metrics) console.log(`relay: metrics on ${metrics.url}/metrics`)

  stopOnSignal('relay', async () => {
    // Stops claiming, lets in-flight webhooks finish, writes what was delivered and hands every lane back, so
    // another relay takes over at once instead of waiting for a lease to expire.
    await relay.stop({ timeoutMs: 10_000 })
    await metrics?.close()
    await db.destroy()
  })
}

if (isMain(import.meta.url)) {
  main().catch((error: unknown) => {
    console.error(`relay: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  })
}
