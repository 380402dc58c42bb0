import { isUuid, type OutboxEvent, parseSigningSecrets, type SigningKey } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import { invalidOption, type OptionMessage, OutboxError } from './errors.js'
import type { ListenOption } from './listen.js'
import { consoleLogger, type Logger } from './logger.js'
import type { MetricsOptions } from './metrics.js'
import { DEFAULT_RETRY_SCHEDULE } from './retry-policy.js'
import { resolveSchema } from './schema-name.js'
import { resolveSecretKeys, type SecretKeyring, type SecretKeys } from './secret-keys.js'

/**
 * An event as the endpoint function sees it: everything but its payload, which the relay sends as stored JSON text
 * and never parses on the hot path.
 */
export type EndpointEvent = Omit<OutboxEvent<unknown>, 'data'>

/** Where an event goes: one URL, or a function of the event (per tenant). All events of one aggregate must map to the same URL. */
export type Endpoint = string | ((event: EndpointEvent) => string)

/** What happens when an event has used all its attempts and is dead-lettered. */
export type OnExhausted = 'skip' | 'block'

/** Options of {@link Relay}. */
export interface RelayOptions {
  /** The database holding the outbox (a Kysely instance on a pool; the relay never holds a connection between queries). */
  readonly db: Kysely<any>
  /**
   * The subscriber's URL, or a function of the event returning it: the relay then serves the implicit subscription
   * (`default`) only. Without it, the relay serves the stored subscriptions (see `createSubscription`): every
   * enabled one, or those named in {@link RelayOptions.subscriptions}.
   */
  readonly endpoint?: Endpoint
  /**
   * Ids of the stored subscriptions this relay serves (a relay dedicated to a large tenant, say); the others are
   * left to other relays. Only without `endpoint`. @defaultValue every enabled stored subscription
   */
  readonly subscriptions?: readonly string[]
  /**
   * Let stored subscriptions' URLs reach loopback, private and link-local addresses. Subscription URLs are
   * customer input, so by default the relay refuses to connect to such addresses, checked on the resolved address
   * at connect time (a DNS name that later resolves inside your network is refused too). Turn it on for tests and
   * internal services. The `endpoint` is the operator's and is never restricted. @defaultValue false
   */
  readonly allowPrivateNetworks?: boolean
  /**
   * Standard Webhooks secret(s) `whsec_…` of at least 24 bytes; with several, every request carries one signature
   * per secret (rotation). Without one, requests go out unsigned and the relay warns once, at the first. For the
   * `endpoint` only: stored subscriptions carry their own secrets. @defaultValue none: unsigned
   */
  readonly secret?: string | readonly string[]
  /** @deprecated Use {@link RelayOptions.secret} (the consumer's and Standard Webhooks' word). */
  readonly signingSecret?: string | readonly string[]
  /**
   * Keys that decrypt stored subscriptions' secrets encrypted at rest (`id:base64` entries, see {@link SecretKeys};
   * the CLI reads `OUTBOX_SECRET_KEYS`). Plaintext secrets need none. A subscription whose secret is encrypted under
   * a key not given here is skipped and reported once (`subscription:skipped`), naming the key id.
   * @defaultValue none: encrypted secrets cannot be read
   */
  readonly secretKeys?: SecretKeys
  /** How long a claim owns its lane. @defaultValue 60000 */
  readonly leaseMs?: number
  /** Timeout of one webhook request, headers and body. Must leave a margin inside `leaseMs`. @defaultValue 10000 */
  readonly requestTimeoutMs?: number
  /** Most events taken from one lane per claim (the head and the contiguous rows behind it). @defaultValue 200 */
  readonly batchSize?: number
  /** Lanes (aggregates) delivered in parallel; each lane has at most one request in flight. @defaultValue 16 */
  readonly concurrency?: number
  /** Milliseconds to wait after the 1st, 2nd, … failed attempt, each ±20%; `maxAttempts = length + 1`. @defaultValue 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h */
  readonly retrySchedule?: readonly number[]
  /** After the last attempt fails: `'skip'` dead-letters and moves the lane on; `'block'` parks the lane until redrive. @defaultValue 'skip' */
  readonly onExhausted?: OnExhausted
  /** How often an idle relay looks for work. @defaultValue 200 */
  readonly pollIntervalMs?: number
  /** Where the relay logs (pino-compatible). @defaultValue warnings and errors to the console */
  readonly logger?: Logger
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /**
   * LISTEN/NOTIFY wake-ups: `{ connectionString }` (a dedicated connection, not a transaction-mode pooler), a
   * function returning a connected `pg.Client`, or `false` to poll only. Polling stays the safety net either way.
   * @defaultValue false
   */
  readonly listen?: ListenOption
  /** Prometheus metrics on your prom-client registry: `{ register }`. @defaultValue off */
  readonly metrics?: MetricsOptions
  /**
   * Most payload bytes the relay holds read but not yet delivered, across all its lanes: each claim and each batch
   * read asks the database for no more than what is left, so memory is bounded in bytes, not only in rows (one
   * event larger than all of it is still read, alone). @defaultValue 67108864 (64 MiB)
   */
  readonly maxBufferedBytes?: number
  /**
   * The circuit breaker of stored subscriptions' endpoints (the implicit `endpoint` has none: it is the only
   * destination of its relay, so there is nobody to protect from it). After `failures` failed attempts in a row
   * across a subscription's lanes (5xx, timeouts, network errors; a 2xx resets the count; 4xx answers other than
   * 408 are the subscriber refusing one event, not an outage, and do not count), the breaker opens: none of its
   * lanes is claimed, by any relay. After `cooldownMs` one relay sends ONE probe request; a 2xx closes the breaker,
   * a failure opens it again for twice the cool-down, up to `maxCooldownMs`. Every relay serving stored
   * subscriptions should use the same settings. `false` turns it off.
   * @defaultValue { failures: 10, cooldownMs: 10000, maxCooldownMs: 600000 }
   */
  readonly endpointBreaker?: EndpointBreakerOptions | false
  /**
   * What the delivery log records (`outbox_delivery_attempt`, listed by `listDeliveryAttempts`): `'all'` every
   * attempt, `'failures'` all but 2xx answers (failures, 409 parks, dead letters), `false` nothing. Its rows are
   * written in the statements the relay runs anyway (the mark flush, the failure outcomes), never one per request.
   * @defaultValue `'all'` for stored subscriptions, `'failures'` for the `endpoint` (see {@link DEFAULT_DELIVERY_LOG})
   */
  readonly deliveryLog?: DeliveryLog
}

/** {@link RelayOptions.deliveryLog}: which attempts the relay records in the delivery log. */
export type DeliveryLog = 'all' | 'failures' | false

/**
 * Default of {@link RelayOptions.deliveryLog}, per kind of subscription. Stored subscriptions log every attempt:
 * they are customers' endpoints, where "we never got it" is asked. The implicit `endpoint` logs failures only, so a
 * single-endpoint relay's 2xx path writes exactly what it wrote before the log existed: a row per 2xx adds a heap
 * row and four index entries to every event's mark, and that relay's budget is a few percent of its throughput
 * (its sent events keep `sent_at` and the consumer's status in `outbox` anyway). `deliveryLog: 'all'` logs them too.
 */
export const DEFAULT_DELIVERY_LOG: Readonly<{ endpoint: DeliveryLog; subscriptions: DeliveryLog }> =
  Object.freeze({
    endpoint: 'failures',
    subscriptions: 'all',
  })

/** {@link RelayOptions.endpointBreaker}: when a stored subscription's endpoint counts as down, and for how long. */
export interface EndpointBreakerOptions {
  /** Failed attempts in a row, across the subscription's lanes, that open the breaker. @defaultValue 10 */
  readonly failures?: number
  /** The first cool-down before a probe. @defaultValue 10000 */
  readonly cooldownMs?: number
  /** The longest cool-down, reached by doubling after each failed probe. @defaultValue 600000 */
  readonly maxCooldownMs?: number
}

/**
 * Default of {@link RelayOptions.endpointBreaker}. Ten outage failures in a row, with no 2xx between, is an outage,
 * not a blip (proxies eject a host sooner: Envoy after 5 consecutive 5xx, Linkerd after 7); what it costs when it
 * trips on a blip is one cool-down. Every failure before it trips is a request, a retry write and a claim that the
 * relay's healthy subscriptions share the machine with: beside 64 endpoints answering 500, the streak of 20 this
 * default once had meant 1,344 failed requests before the last breaker opened.
 */
export const DEFAULT_ENDPOINT_BREAKER: Readonly<Required<EndpointBreakerOptions>> = Object.freeze({
  failures: 10,
  cooldownMs: 10_000,
  maxCooldownMs: 600_000,
})

/** Default of {@link RelayOptions.leaseMs}. */
export const DEFAULT_LEASE_MS = 60_000
/** Default of {@link RelayOptions.requestTimeoutMs}. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000
/** Default of {@link RelayOptions.batchSize}. */
export const DEFAULT_BATCH_SIZE = 200
/** Default of {@link RelayOptions.concurrency}. */
export const DEFAULT_CONCURRENCY = 16
/** Default of {@link RelayOptions.pollIntervalMs}. */
export const DEFAULT_POLL_INTERVAL_MS = 200
/** Default of {@link RelayOptions.maxBufferedBytes}: 64 MiB. */
export const DEFAULT_MAX_BUFFERED_BYTES = 64 * 1024 * 1024
/**
 * Time a lease must still have, beyond the request timeout, before a request starts: it covers the claim's round
 * trip and the teardown of a timed-out request, so a request never outlives the lease that allowed it.
 */
export const LEASE_MARGIN_MS = 250

/** {@link RelayOptions} checked, defaulted and frozen. */
export interface ResolvedRelayOptions {
  readonly db: Kysely<any>
  /** Undefined when the relay serves stored subscriptions. */
  readonly endpoint: ((event: EndpointEvent) => string) | undefined
  /** The stored subscriptions to serve: undefined for all (or for none, when `endpoint` is set). */
  readonly subscriptions: readonly string[] | undefined
  readonly allowPrivateNetworks: boolean
  readonly signingKeys: readonly SigningKey[]
  /** What decrypts stored subscriptions' secrets; undefined when no keys were given. */
  readonly secretKeys: SecretKeyring | undefined
  readonly leaseMs: number
  readonly requestTimeoutMs: number
  readonly batchSize: number
  readonly concurrency: number
  readonly retrySchedule: readonly number[]
  readonly maxAttempts: number
  readonly onExhausted: OnExhausted
  readonly pollIntervalMs: number
  readonly logger: Logger
  readonly schema: string
  readonly listen: ListenOption
  readonly metrics: MetricsOptions | undefined
  readonly maxBufferedBytes: number
  readonly endpointBreaker: Readonly<Required<EndpointBreakerOptions>> | false
  /** Undefined: each subscription's default ({@link DEFAULT_DELIVERY_LOG}). */
  readonly deliveryLog: DeliveryLog | undefined
}

/**
 * Every option {@link RelayOptions} has (a record, so adding an option without listing it fails to compile):
 * anything else is a typo that would otherwise be ignored.
 */
const KNOWN: Readonly<Record<keyof RelayOptions, true>> = {
  db: true,
  endpoint: true,
  secret: true,
  signingSecret: true,
  secretKeys: true,
  subscriptions: true,
  allowPrivateNetworks: true,
  leaseMs: true,
  requestTimeoutMs: true,
  batchSize: true,
  concurrency: true,
  retrySchedule: true,
  onExhausted: true,
  pollIntervalMs: true,
  logger: true,
  schema: true,
  listen: true,
  metrics: true,
  maxBufferedBytes: true,
  endpointBreaker: true,
  deliveryLog: true,
}
const KNOWN_OPTIONS = Object.keys(KNOWN)

function invalid(option: string, value: unknown, render: OptionMessage, cause?: unknown): never {
  throw invalidOption(option, value, render, cause)
}

function integer(
  value: unknown,
  fallback: number,
  name: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const resolved = value ?? fallback
  if (typeof resolved !== 'number' || !Number.isSafeInteger(resolved) || resolved < min || resolved > max) {
    invalid(
      name,
      value,
      (spell, got) => `${spell(name)} must be an integer from ${min} to ${max}, got ${got}`,
    )
  }
  return resolved
}

/** Checks an endpoint URL: absolute, http or https. */
export function checkEndpointUrl(url: unknown, name = 'endpoint'): string {
  if (typeof url !== 'string') {
    invalid(name, url, (spell) => `${spell(name)} must be an absolute http(s) URL string, got ${typeof url}`)
  }
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch (error) {
    invalid(
      name,
      url,
      (spell, got) => `${spell(name)} is not a valid URL: ${got} (expected e.g. https://example.com/hooks)`,
      error,
    )
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    invalid(
      name,
      url,
      (spell) => `${spell(name)} must use http or https, got ${parsed.protocol.replace(':', '')}`,
    )
  }
  return url
}

/** Checks {@link RelayOptions.subscriptions}: subscription ids, and only for a relay without `endpoint`. */
function checkSubscriptionIds(ids: unknown, hasEndpoint: boolean): readonly string[] | undefined {
  if (ids === undefined) return undefined
  if (hasEndpoint) {
    invalid(
      'subscriptions',
      undefined,
      (spell) =>
        `give ${spell('endpoint')} or ${spell('subscriptions')}, not both: a relay with an endpoint serves the implicit subscription only`,
    )
  }
  if (!Array.isArray(ids) || ids.length === 0 || ids.some((id) => !isUuid(id))) {
    invalid(
      'subscriptions',
      undefined,
      (spell) =>
        `${spell('subscriptions')} must be a non-empty array of subscription ids (uuids, as createSubscription returns them)`,
    )
  }
  return Object.freeze(ids.map((id: string) => id.toLowerCase()))
}

/** Validates relay options once, at construction, with messages that say what to change. */
export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'Relay needs an options object: new Relay({ db, endpoint })',
    )
  }
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(KNOWN, key)) {
      // A typo such as `secrets` would otherwise silently send unsigned requests.
      invalid(
        key,
        undefined,
        (spell) => `unknown option ${spell(key)}; known options are ${KNOWN_OPTIONS.join(', ')}`,
      )
    }
  }
  const { db } = options
  if (
    typeof db !== 'object' ||
    db === null ||
    typeof (db as { selectFrom?: unknown }).selectFrom !== 'function'
  ) {
    invalid(
      'db',
      undefined,
      (spell) =>
        `${spell('db')} must be a Kysely instance (new Kysely({ dialect: new PostgresDialect({ pool }) }))`,
    )
  }
  let endpoint: ((event: EndpointEvent) => string) | undefined
  if (typeof options.endpoint === 'function') endpoint = options.endpoint
  else if (options.endpoint !== undefined) {
    const url = checkEndpointUrl(options.endpoint)
    endpoint = () => url
  }
  const subscriptions = checkSubscriptionIds(options.subscriptions, endpoint !== undefined)
  if (endpoint === undefined && (options.secret ?? options.signingSecret) !== undefined) {
    invalid(
      options.secret === undefined ? 'signingSecret' : 'secret',
      undefined,
      (spell) =>
        `${spell('secret')} signs the ${spell('endpoint')}'s requests, and no endpoint was given: stored subscriptions carry their own secrets (createSubscription); give both for the implicit subscription, or neither`,
    )
  }
  const allowPrivateNetworks = options.allowPrivateNetworks ?? false
  if (typeof allowPrivateNetworks !== 'boolean') {
    invalid(
      'allowPrivateNetworks',
      allowPrivateNetworks,
      (spell, got) => `${spell('allowPrivateNetworks')} must be true or false; got ${got}`,
    )
  }
  if (options.secret !== undefined && options.signingSecret !== undefined) {
    invalid(
      'signingSecret',
      undefined,
      (spell) => `give ${spell('secret')} only: ${spell('signingSecret')} is its deprecated old name`,
    )
  }
  const secretOption = options.signingSecret !== undefined ? 'signingSecret' : 'secret'
  const secret = options.secret ?? options.signingSecret
  let signingKeys: readonly SigningKey[] = []
  if (secret !== undefined) {
    try {
      signingKeys = parseSigningSecrets(secret)
    } catch (error) {
      // The protocol's message already says "signing secret", names the bad entry and never shows a secret.
      const detail = error instanceof Error ? error.message : String(error)
      invalid(secretOption, undefined, () => detail, error)
    }
  }
  const secretKeys = resolveSecretKeys(options.secretKeys)
  const leaseMs = integer(options.leaseMs, DEFAULT_LEASE_MS, 'leaseMs', 100)
  const requestTimeoutMs = integer(
    options.requestTimeoutMs,
    DEFAULT_REQUEST_TIMEOUT_MS,
    'requestTimeoutMs',
    1,
  )
  if (requestTimeoutMs + LEASE_MARGIN_MS >= leaseMs) {
    invalid(
      'requestTimeoutMs',
      requestTimeoutMs,
      (spell) =>
        `${spell('requestTimeoutMs')} (${requestTimeoutMs}) + a ${LEASE_MARGIN_MS} ms margin must be below ${spell('leaseMs')} (${leaseMs}): a request must never outlive the lease that allowed it; raise ${spell('leaseMs')} or lower ${spell('requestTimeoutMs')}`,
    )
  }
  const retrySchedule = options.retrySchedule ?? DEFAULT_RETRY_SCHEDULE
  if (
    !Array.isArray(retrySchedule) ||
    retrySchedule.some((delay) => typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0)
  ) {
    invalid(
      'retrySchedule',
      retrySchedule,
      (spell) =>
        `${spell('retrySchedule')} must be an array of non-negative millisecond delays, e.g. [5000, 300000]`,
    )
  }
  const listen = options.listen ?? false
  if (listen !== false && typeof listen !== 'function') {
    const form = listen as { connectionString?: unknown; connect?: unknown } | null
    if (
      typeof form !== 'object' ||
      form === null ||
      (typeof form.connectionString === 'string') === (typeof form.connect === 'function')
    ) {
      invalid(
        'listen',
        undefined,
        (spell) =>
          `${spell('listen')} must be { connectionString } or { connect } (a function returning a connected pg.Client), such a function, or false`,
      )
    }
    if ('connectTimeoutMs' in listen && listen.connectTimeoutMs !== undefined) {
      integer(listen.connectTimeoutMs, 0, 'listen.connectTimeoutMs', 1)
    }
    // 0 turns the heartbeat off; its timeout needs at least a millisecond.
    if (listen.heartbeatIntervalMs !== undefined) {
      integer(listen.heartbeatIntervalMs, 0, 'listen.heartbeatIntervalMs', 0)
    }
    if (listen.heartbeatTimeoutMs !== undefined) {
      integer(listen.heartbeatTimeoutMs, 0, 'listen.heartbeatTimeoutMs', 1)
    }
  }
  if (options.metrics !== undefined) {
    const register = (options.metrics as { register?: { registerMetric?: unknown } } | null)?.register
    if (typeof register?.registerMetric !== 'function') {
      invalid(
        'metrics',
        undefined,
        (spell) =>
          `${spell('metrics')} must be { register } with a prom-client Registry (e.g. new Registry() or the default register)`,
      )
    }
    const labels = (options.metrics as { subscriptionLabels?: unknown }).subscriptionLabels
    const max = (labels as { max?: unknown } | null)?.max
    if (
      labels !== undefined &&
      labels !== 'all' &&
      labels !== 'none' &&
      !(typeof max === 'number' && Number.isSafeInteger(max) && max >= 0)
    ) {
      invalid(
        'metrics.subscriptionLabels',
        labels,
        (spell, got) =>
          `${spell('metrics.subscriptionLabels')} must be 'all', 'none' or { max: <integer ≥ 0> }, got ${got}`,
      )
    }
  }
  const breaker = options.endpointBreaker ?? {}
  if (breaker !== false && (typeof breaker !== 'object' || breaker === null)) {
    invalid(
      'endpointBreaker',
      breaker,
      (spell) => `${spell('endpointBreaker')} must be { failures?, cooldownMs?, maxCooldownMs? } or false`,
    )
  }
  const endpointBreaker =
    breaker === false
      ? false
      : Object.freeze({
          failures: integer(
            breaker.failures,
            DEFAULT_ENDPOINT_BREAKER.failures,
            'endpointBreaker.failures',
            1,
            10_000,
          ),
          cooldownMs: integer(
            breaker.cooldownMs,
            DEFAULT_ENDPOINT_BREAKER.cooldownMs,
            'endpointBreaker.cooldownMs',
            1,
          ),
          maxCooldownMs: integer(
            breaker.maxCooldownMs,
            Math.max(DEFAULT_ENDPOINT_BREAKER.maxCooldownMs, breaker.cooldownMs ?? 0),
            'endpointBreaker.maxCooldownMs',
            breaker.cooldownMs ?? DEFAULT_ENDPOINT_BREAKER.cooldownMs,
          ),
        })
  const { deliveryLog } = options
  if (
    deliveryLog !== undefined &&
    deliveryLog !== 'all' &&
    deliveryLog !== 'failures' &&
    deliveryLog !== false
  ) {
    invalid(
      'deliveryLog',
      deliveryLog,
      (spell, got) => `${spell('deliveryLog')} must be one of 'all', 'failures', false; got ${got}`,
    )
  }
  const onExhausted = options.onExhausted ?? 'skip'
  if (onExhausted !== 'skip' && onExhausted !== 'block') {
    invalid(
      'onExhausted',
      onExhausted,
      (spell, got) => `${spell('onExhausted')} must be one of skip, block; got ${got}`,
    )
  }
  return Object.freeze({
    db,
    endpoint,
    subscriptions,
    allowPrivateNetworks,
    signingKeys,
    secretKeys,
    leaseMs,
    requestTimeoutMs,
    batchSize: integer(options.batchSize, DEFAULT_BATCH_SIZE, 'batchSize', 1, 10_000),
    concurrency: integer(options.concurrency, DEFAULT_CONCURRENCY, 'concurrency', 1, 1_000),
    retrySchedule: Object.freeze([...retrySchedule]),
    maxAttempts: retrySchedule.length + 1,
    onExhausted,
    pollIntervalMs: integer(options.pollIntervalMs, DEFAULT_POLL_INTERVAL_MS, 'pollIntervalMs', 1),
    logger: options.logger ?? consoleLogger,
    schema: resolveSchema(options.schema),
    listen,
    metrics: options.metrics,
    maxBufferedBytes: integer(options.maxBufferedBytes, DEFAULT_MAX_BUFFERED_BYTES, 'maxBufferedBytes', 1024),
    endpointBreaker,
    deliveryLog,
  })
}
