import {
  DEFAULT_SIGNATURE_TOLERANCE_SECONDS,
  type EventCatalog,
  parseSigningSecrets,
  resolveSchema,
  type SigningKey,
  type UntypedCatalog,
} from '@outbox/protocol'
import { type Kysely, PostgresAdapter } from 'kysely'
import { type EnvelopeReader, outboxEnvelope } from './core/envelope-reader.js'
import {
  standardWebhooksVerifier,
  toVerifier,
  type VerifyFunction,
  type WebhookVerifier,
} from './core/verifier.js'
import { OutboxError } from './errors.js'
import { guardedPoolCount } from './guard-pool.js'
import { consoleLogger, isLogger, type Logger } from './logger.js'
import { checkPayloadSchemas, type PayloadSchemas } from './payload-schemas.js'
import type { Refusal } from './respond.js'

/**
 * How `dedupe` treats an aggregate's sequence numbers (the aggregate is the pair `aggregate_type`,
 * `aggregate_id`).
 *
 * - `'monotonic'`: apply an event newer than the aggregate's cursor; an older event not seen before is recorded
 *   and answered `stale_ignored` without running the handler.
 * - `'strict'`: apply only the cursor's next sequence; a gap answers 409 (`sequence_gap`) and records nothing, so
 *   the relay parks the lane until the missing event arrives; an unseen event at or below the cursor is
 *   `stale_ignored`. Needs the producer's `onExhausted: 'block'` and an endpoint that receives every event of
 *   the aggregate.
 * - `'off'`: dedupe only; no cursor is kept.
 *
 * @example
 * ```ts
 * import type { SequencePolicy } from '@outbox/consumer'
 * const policy: SequencePolicy = process.env.STRICT_ORDER === '1' ? 'strict' : 'monotonic'
 * ```
 */
export type SequencePolicy = 'monotonic' | 'strict' | 'off'

/**
 * Under `sequence: 'strict'`, which sequence an aggregate's first event may carry: `1` (the aggregate's whole
 * history must arrive) or `'any'` (a subscriber joining mid-stream starts at whatever arrives first).
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const { dedupe } = createConsumer({ db, secret: process.env.OUTBOX_SECRET, sequence: 'strict', firstSequence: 'any' })
 * ```
 */
export type FirstSequence = 1 | 'any'

/**
 * Options of {@link createConsumer}. Checked once, when the consumer is created: a wrong or unknown option
 * throws `OutboxError` there, never at the first request.
 *
 * @example
 * ```ts
 * import { createPool } from '@outbox/consumer'
 * import type { ConsumerOptions } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const options: ConsumerOptions = {
 *   db: new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) }),
 *   // 'whsec_new,whsec_old' during a rotation: comma-separated, as `outbox relay` reads the same variable
 *   secret: (process.env.OUTBOX_SECRET ?? '').split(','),
 *   sequence: 'monotonic',
 *   maxBodyBytes: 2 * 1024 * 1024,
 * }
 * ```
 */
export interface ConsumerOptions<DB = any, Catalog extends EventCatalog = UntypedCatalog> {
  /** The Kysely instance (not a transaction): each delivery runs in its own transaction on it. */
  readonly db: Kysely<DB>
  /**
   * Standard Webhooks secret(s) (`whsec_…`, at least 24 bytes); several during a rotation, any of which may sign:
   * an array, or one string with commas (`'whsec_new,whsec_old'`, as `OUTBOX_SECRET` holds them for the relay).
   * One of `secret`, `verify` or `allowUnsigned: true` is required.
   * @defaultValue undefined
   */
  readonly secret?: string | readonly string[]
  /**
   * How requests of another sender are authenticated, instead of `secret`: `stripeVerifier(…)`,
   * `githubVerifier(…)`, `standardWebhooksVerifier(…)`, your own {@link WebhookVerifier}, or a function
   * `(headers, body) => boolean`.
   */
  readonly verify?: WebhookVerifier | VerifyFunction
  /**
   * Accept requests with no authentication at all — only for tests or a network where nothing else can reach the
   * endpoint: anyone who can send a request can then make the consumer record (and apply) any event. Without it, a
   * consumer with neither `secret` nor `verify` is refused at start.
   * @defaultValue false
   */
  readonly allowUnsigned?: boolean
  /**
   * How another sender's JSON body becomes an event (its id, type, data and, when it has them, aggregate and
   * sequence): `stripeEnvelope`, `githubEnvelope`, `standardWebhooksEnvelope` or your own. Defaults to this
   * project's envelope, whose headers must repeat its id and sequence.
   */
  readonly envelope?: EnvelopeReader
  /**
   * Run-time validation of `data` by event type, with any Standard Schema library (zod, valibot, arktype …): an
   * event whose payload fails its schema is answered 422 `invalid_payload` and nothing is recorded (the relay
   * retries it and, when its attempts run out, keeps it as a dead letter). The handler gets the schema's output.
   * Types without a schema pass unchecked. Under `createConsumer<DB, Catalog>`, each schema's output must be the
   * catalog's payload type; see {@link PayloadSchemas}.
   */
  readonly schemas?: PayloadSchemas<Catalog>
  /**
   * The sequence policy; see {@link SequencePolicy}.
   * @defaultValue 'monotonic', or 'off' when `envelope` is given (another sender's events rarely have sequences)
   */
  readonly sequence?: SequencePolicy
  /** Under `'strict'` only: which sequence an aggregate's first event may have. @defaultValue 1 */
  readonly firstSequence?: FirstSequence
  /**
   * PostgreSQL schema of `processed_events` and `consumer_cursors` (as given to `migrate`): a lower-case SQL
   * identifier, as the producer's. @defaultValue 'public'
   */
  readonly schema?: string
  /**
   * The sender this consumer receives from, part of the key of `processed_events` and `consumer_cursors`: two
   * consumers with different sources (Stripe and your own relay, or two producers) never collide on an event id or
   * an aggregate, and a producer whose counters were reset can be given a new source. 1–255 characters.
   * @defaultValue 'default'
   */
  readonly source?: string
  /** Largest accepted body in bytes, enforced while reading. @defaultValue 1048576 (1 MiB) */
  readonly maxBodyBytes?: number
  /**
   * Longest time a request's body may take to arrive once the consumer starts reading it: a client trickling its
   * body is answered 408 `request_timeout` and its connection closed. Holds under every adapter, whatever the
   * server's own timeouts. @defaultValue 10000
   */
  readonly bodyTimeoutMs?: number
  /**
   * Most bodies read at once by this consumer: a request arriving while that many are being read is answered 503
   * `server_busy` with `Retry-After` and its connection closed, unread. Bounds the memory bodies in transit hold to
   * `maxBodyBytes` × this. @defaultValue 64
   */
  readonly maxConcurrentBodies?: number
  /**
   * How fast the bytes of request bodies past their first 64 KiB are read, all requests together, in bytes per
   * second (each waits its turn, unread, its sender held back by TCP). A request with well-formed signature headers
   * is refused only once its whole body is read and hashed: this bounds what a client without the secret sending
   * large bodies in a loop takes of the consumer, while real deliveries — a body in one chunk — never wait. Raise it
   * for senders of many large bodies: the default reads 128 bodies of 256 KiB a second.
   * @defaultValue 33554432 (32 MiB/s)
   */
  readonly largeBodyBytesPerSecond?: number
  /**
   * Refusals (4xx) are logged at `warn` at most once per problem code per this interval, with the `count` of
   * refusals the line stands for; each request's own line is at `debug`. @defaultValue 10000
   */
  readonly logIntervalMs?: number
  /** Accepted distance between `webhook-timestamp` and this server's clock, either way. @defaultValue 300 */
  readonly toleranceSeconds?: number
  /** Where refusals, failures and (at debug) outcomes are logged. @defaultValue warn/error to the console */
  readonly logger?: Logger
  /**
   * Called for every refusal (4xx and 5xx) before it is answered, with the adapter's own request object; errors it
   * throws are logged and ignored. Each adapter also takes an `onError` typed with its own request.
   */
  readonly onError?: ErrorListener<unknown>
}

/**
 * A refusal listener: the refusal and the adapter's own request (`WebhookRequest`, web `Request`,
 * `IncomingMessage`, `FastifyRequest` or Express `Request`). Declared as a method so a listener typed with a
 * narrower request is accepted.
 *
 * @example
 * ```ts
 * import type { ErrorListener } from '@outbox/consumer'
 * const onError: ErrorListener<Request> = (refused, req) => console.warn(refused.code, req.url)
 * ```
 */
export type ErrorListener<TReq> = { bivarianceHack(refused: Refusal, req: TReq): void }['bivarianceHack']

/**
 * The checked, fully defaulted and frozen form of {@link ConsumerOptions}, built once per consumer.
 *
 * @example
 * ```ts
 * import type { ResolvedConsumerOptions } from '@outbox/consumer'
 * const describePolicy = (options: ResolvedConsumerOptions) => `${options.sequence}, ${options.maxBodyBytes} bytes`
 * ```
 */
export interface ResolvedConsumerOptions {
  readonly db: Kysely<any>
  /** The signing keys of `secret`, when given. */
  readonly keys: readonly SigningKey[] | undefined
  /** How requests are authenticated; undefined only under `allowUnsigned: true`. */
  readonly verifier: WebhookVerifier | undefined
  /** How a body becomes an event. */
  readonly envelope: EnvelopeReader
  /** This project's envelope reader, when `envelope` was not given (its output needs no further checks). */
  readonly defaultEnvelope: EnvelopeReader | undefined
  readonly schemas: PayloadSchemas | undefined
  readonly sequence: SequencePolicy
  readonly firstSequence: FirstSequence
  readonly schema: string
  readonly source: string
  readonly maxBodyBytes: number
  readonly bodyTimeoutMs: number
  readonly maxConcurrentBodies: number
  readonly largeBodyBytesPerSecond: number
  readonly logIntervalMs: number
  readonly toleranceSeconds: number
  readonly logger: Logger
  readonly onError: ErrorListener<unknown> | undefined
}

/**
 * Default body limit: 1 MiB, above the producer's 256 KiB payload limit so every accepted event is deliverable.
 *
 * @example
 * ```ts
 * import { DEFAULT_MAX_BODY_BYTES } from '@outbox/consumer'
 * const limit = 4 * DEFAULT_MAX_BODY_BYTES
 * ```
 */
export const DEFAULT_MAX_BODY_BYTES = 1_048_576

/**
 * Default `bodyTimeoutMs`: 10 s, ample for a 1 MiB body on any working link, far below Node's 300 s
 * `requestTimeout` (and Fastify's none).
 *
 * @example
 * ```ts
 * import { DEFAULT_BODY_TIMEOUT_MS } from '@outbox/consumer'
 * const bodyTimeoutMs = 3 * DEFAULT_BODY_TIMEOUT_MS // a sender on a slow link
 * ```
 */
export const DEFAULT_BODY_TIMEOUT_MS = 10_000

/**
 * Default `maxConcurrentBodies`: 64 bodies, so at most 64 MiB in transit under the default `maxBodyBytes`.
 *
 * @example
 * ```ts
 * import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT_BODIES } from '@outbox/consumer'
 * console.log(DEFAULT_MAX_BODY_BYTES * DEFAULT_MAX_CONCURRENT_BODIES) // bytes bodies may hold at most
 * ```
 */
export const DEFAULT_MAX_CONCURRENT_BODIES = 64

/**
 * Default `largeBodyBytesPerSecond`: 32 MiB/s, a few percent of one core spent on forged large bodies at most.
 *
 * @example
 * ```ts
 * import { DEFAULT_LARGE_BODY_BYTES_PER_SECOND } from '@outbox/consumer'
 * const largeBodyBytesPerSecond = 4 * DEFAULT_LARGE_BODY_BYTES_PER_SECOND // a sender of many large payloads
 * ```
 */
export const DEFAULT_LARGE_BODY_BYTES_PER_SECOND = 33_554_432

/**
 * Default `logIntervalMs`: one `warn` line per refusal code per 10 s.
 *
 * @example
 * ```ts
 * import { DEFAULT_LOG_INTERVAL_MS } from '@outbox/consumer'
 * console.log(DEFAULT_LOG_INTERVAL_MS) // 10000
 * ```
 */
export const DEFAULT_LOG_INTERVAL_MS = 10_000

/**
 * Default sequence policy.
 *
 * @example
 * ```ts
 * import { DEFAULT_SEQUENCE_POLICY } from '@outbox/consumer'
 * console.log(DEFAULT_SEQUENCE_POLICY) // 'monotonic'
 * ```
 */
export const DEFAULT_SEQUENCE_POLICY: SequencePolicy = 'monotonic'

/**
 * Default consumer `source`: the name rows written before sources existed were given by the migration.
 *
 * @example
 * ```ts
 * import { DEFAULT_SOURCE } from '@outbox/consumer'
 * console.log(DEFAULT_SOURCE) // 'default'
 * ```
 */
export const DEFAULT_SOURCE = 'default'

/** Longest accepted `source`, as the producer's keys. */
const MAX_SOURCE_LENGTH = 255

/** The producer's default payload limit; a smaller consumer limit would refuse events the relay must deliver. */
const PRODUCER_DEFAULT_PAYLOAD_BYTES = 256 * 1024

const KNOWN_OPTIONS = [
  'db',
  'secret',
  'verify',
  'allowUnsigned',
  'envelope',
  'schemas',
  'sequence',
  'firstSequence',
  'schema',
  'source',
  'maxBodyBytes',
  'bodyTimeoutMs',
  'maxConcurrentBodies',
  'largeBodyBytesPerSecond',
  'logIntervalMs',
  'toleranceSeconds',
  'logger',
  'onError',
] as const
const POLICIES: readonly SequencePolicy[] = ['monotonic', 'strict', 'off']

function invalid(option: string, message: string): OutboxError {
  return new OutboxError('ERR_OUTBOX_INVALID_OPTION', `createConsumer: ${message}`, { option })
}

/** Whether `db` runs on PostgreSQL (Kysely's PostgreSQL adapter, from this copy of Kysely or another). */
function isPostgres(db: Kysely<any>): boolean {
  const adapter = (db as { getExecutor?: () => { adapter?: unknown } }).getExecutor?.().adapter
  return adapter instanceof PostgresAdapter || adapter?.constructor?.name === 'PostgresAdapter'
}

/** Throws unless `value` looks like a Kysely instance that can open transactions. */
export function checkDatabase(value: unknown, where: string): Kysely<any> {
  const db = value as Partial<Kysely<any>> | null | undefined
  if (typeof db !== 'object' || db === null || typeof db.selectFrom !== 'function') {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `${where}: \`db\` must be a Kysely instance, e.g. new Kysely({ dialect: new PostgresDialect({ pool }) })`,
      { option: 'db' },
    )
  }
  return db as Kysely<any>
}

/**
 * Checks a schema option with the producer's rule (a lower-case SQL identifier) and returns it, or `'public'`
 * when it is left out; `where` names the function in the message.
 */
export function checkSchema(value: unknown, where: string): string {
  try {
    return resolveSchema(value as string | undefined)
  } catch (error) {
    throw new OutboxError('ERR_OUTBOX_INVALID_OPTION', `${where}: ${(error as Error).message}`, {
      cause: error,
      option: 'schema',
    })
  }
}

/** Checks {@link ConsumerOptions} and returns the frozen, defaulted form; every message says what to do. */
export function resolveConsumerOptions(options: ConsumerOptions): ResolvedConsumerOptions {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'createConsumer: pass an options object: createConsumer({ db, secret })',
    )
  }
  for (const key of Object.keys(options)) {
    if (!(KNOWN_OPTIONS as readonly string[]).includes(key)) {
      // A typo such as `secrets` would otherwise silently turn signature checks off.
      throw invalid(key, `unknown option \`${key}\`; known options are ${KNOWN_OPTIONS.join(', ')}`)
    }
  }
  const db = checkDatabase(options.db, 'createConsumer')
  if ((db as { isTransaction?: boolean }).isTransaction === true) {
    throw invalid(
      'db',
      '`db` is a transaction; pass the Kysely instance itself — dedupe opens one transaction per delivery',
    )
  }

  let keys: readonly SigningKey[] | undefined
  if (options.secret !== undefined) {
    try {
      keys = parseSigningSecrets(options.secret)
    } catch (error) {
      const detail =
        (error as OutboxError).code === 'ERR_OUTBOX_INVALID_SECRET'
          ? (error as Error).message
          : 'the secret is not usable'
      throw new OutboxError('ERR_OUTBOX_INVALID_SECRET', `createConsumer: ${detail}`, {
        cause: error,
        option: 'secret',
      })
    }
  }

  if (options.secret !== undefined && options.verify !== undefined) {
    throw invalid(
      'verify',
      "`secret` and `verify` both authenticate requests: give `secret` for this project's relay (or any Standard Webhooks sender), or `verify` for another sender",
    )
  }
  if (options.verify !== undefined) {
    const verify = options.verify as Partial<WebhookVerifier> | VerifyFunction
    if (
      typeof verify !== 'function' &&
      (typeof verify !== 'object' || typeof verify?.verify !== 'function')
    ) {
      throw invalid(
        'verify',
        '`verify` must be a verifier such as stripeVerifier({ secret }) or a function (headers, body) => boolean',
      )
    }
  }
  if (options.allowUnsigned !== undefined && typeof options.allowUnsigned !== 'boolean') {
    throw invalid(
      'allowUnsigned',
      `\`allowUnsigned\` must be true or false (got ${String(options.allowUnsigned)})`,
    )
  }
  if (options.allowUnsigned === true && (options.secret !== undefined || options.verify !== undefined)) {
    throw invalid(
      'allowUnsigned',
      '`allowUnsigned: true` cannot go with `secret` or `verify`: remove it, requests are then authenticated',
    )
  }
  if (keys === undefined && options.verify === undefined && options.allowUnsigned !== true) {
    // Unauthenticated by accident would let anyone record any event — one forged sequence 2^53−1 freezes its
    // aggregate for good — so it must be asked for by name.
    throw invalid(
      'secret',
      "pass `secret` (the relay's whsec_… signing secret), `verify` for another sender, or `allowUnsigned: true` to accept webhooks without authentication (tests, a closed network)",
    )
  }
  if (options.envelope !== undefined && typeof options.envelope !== 'function') {
    throw invalid('envelope', '`envelope` must be a function (body, headers) => event, e.g. stripeEnvelope')
  }
  const schemas = checkPayloadSchemas(options.schemas, 'createConsumer')

  // Another sender's events rarely carry aggregates and sequences: with `envelope`, ordering is asked for by name.
  const sequence = options.sequence ?? (options.envelope === undefined ? DEFAULT_SEQUENCE_POLICY : 'off')
  if (!POLICIES.includes(sequence)) {
    throw invalid(
      'sequence',
      `\`sequence\` must be 'monotonic', 'strict' or 'off' (got ${JSON.stringify(sequence)})`,
    )
  }
  if (options.firstSequence !== undefined) {
    if (options.firstSequence !== 1 && options.firstSequence !== 'any') {
      throw invalid(
        'firstSequence',
        `\`firstSequence\` must be 1 or 'any' (got ${JSON.stringify(options.firstSequence)})`,
      )
    }
    if (sequence !== 'strict') {
      throw invalid(
        'firstSequence',
        "`firstSequence` only applies to sequence: 'strict'; remove it or set sequence: 'strict'",
      )
    }
  }

  const source = options.source ?? DEFAULT_SOURCE
  if (
    typeof source !== 'string' ||
    source.length === 0 ||
    source.length > MAX_SOURCE_LENGTH ||
    source.includes('\u0000')
  ) {
    throw invalid(
      'source',
      `\`source\` must be a name of 1 to ${MAX_SOURCE_LENGTH} characters without NUL, e.g. 'stripe' (got ${JSON.stringify(source)})`,
    )
  }
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes < 1) {
    throw invalid(
      'maxBodyBytes',
      `\`maxBodyBytes\` must be a positive whole number of bytes (got ${String(maxBodyBytes)})`,
    )
  }
  const positiveWhole = (
    option: 'bodyTimeoutMs' | 'maxConcurrentBodies' | 'logIntervalMs' | 'largeBodyBytesPerSecond',
    fallback: number,
  ) => {
    const value = options[option] ?? fallback
    if (!Number.isSafeInteger(value) || value < 1) {
      throw invalid(option, `\`${option}\` must be a positive whole number (got ${String(value)})`)
    }
    return value
  }
  const bodyTimeoutMs = positiveWhole('bodyTimeoutMs', DEFAULT_BODY_TIMEOUT_MS)
  const maxConcurrentBodies = positiveWhole('maxConcurrentBodies', DEFAULT_MAX_CONCURRENT_BODIES)
  const largeBodyBytesPerSecond = positiveWhole(
    'largeBodyBytesPerSecond',
    DEFAULT_LARGE_BODY_BYTES_PER_SECOND,
  )
  const logIntervalMs = positiveWhole('logIntervalMs', DEFAULT_LOG_INTERVAL_MS)
  const toleranceSeconds = options.toleranceSeconds ?? DEFAULT_SIGNATURE_TOLERANCE_SECONDS
  if (typeof toleranceSeconds !== 'number' || !Number.isFinite(toleranceSeconds) || toleranceSeconds <= 0) {
    throw invalid(
      'toleranceSeconds',
      `\`toleranceSeconds\` must be a positive number of seconds (got ${String(toleranceSeconds)})`,
    )
  }
  if (options.logger !== undefined && !isLogger(options.logger)) {
    throw invalid(
      'logger',
      '`logger` must have debug, info, warn and error methods taking (fields, message): pino fits directly',
    )
  }
  if (options.onError !== undefined && typeof options.onError !== 'function') {
    throw invalid('onError', '`onError` must be a function (refusal, req) => void')
  }

  const logger = options.logger ?? consoleLogger
  if (maxBodyBytes < PRODUCER_DEFAULT_PAYLOAD_BYTES) {
    logger.warn(
      { maxBodyBytes },
      'maxBodyBytes is below the producer default payload limit (256 KiB): larger events will get 413',
    )
  }
  if (isPostgres(db) && guardedPoolCount() === 0) {
    // A connection cut while a handler holds it would end the process; Kysely hides the pool, but a process that
    // guarded none cannot have guarded this one.
    logger.warn(
      {},
      "the PostgreSQL pool behind `db` is not guarded: a database restart, failover or terminated backend while a handler runs will crash the process (pg emits 'error' on the checked-out client). Create it with createPool(…) from @outbox/consumer, or pass it through guardPool(pool)",
    )
  }
  if (options.allowUnsigned === true) {
    logger.warn(
      {},
      'allowUnsigned: webhooks are accepted without authentication; pass `secret` wherever anyone else can reach the endpoint',
    )
  }
  const toleranceOptions = { toleranceSeconds }
  const verifier =
    keys !== undefined
      ? standardWebhooksVerifier(keys, toleranceOptions)
      : options.verify === undefined
        ? undefined
        : toVerifier(options.verify)
  const defaultEnvelope = options.envelope === undefined ? outboxEnvelope(keys !== undefined) : undefined
  return Object.freeze({
    db,
    keys,
    verifier,
    envelope: options.envelope ?? (defaultEnvelope as EnvelopeReader),
    defaultEnvelope,
    schemas,
    sequence,
    firstSequence: options.firstSequence ?? 1,
    schema: checkSchema(options.schema, 'createConsumer'),
    source,
    maxBodyBytes,
    bodyTimeoutMs,
    maxConcurrentBodies,
    largeBodyBytesPerSecond,
    logIntervalMs,
    toleranceSeconds,
    logger,
    onError: options.onError,
  })
}
