import { isUuid } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { ListenOption, Logger, OnExhausted, Relay, RelayOptions } from '../index.js'
import { silentLogger } from '../logger.js'
import { checkSchemaNotNewer } from '../schema-version.js'
import { UNSIGNED_WARNING } from '../unsigned-warning.js'
import { DEFAULT_STOP_TIMEOUT_MS } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import type { CliIo } from './command.js'
import { explainDatabaseError } from './describe-error.js'
import { catchInterrupt, signalExitCode } from './interrupt.js'
import { loadProducer, type Producer } from './load-producer.js'
import { connectionConfig, type DatabaseTarget, resolveDatabase, withDatabase } from './open-database.js'
import { flagMessage } from './option-flags.js'
import {
  choiceFlag,
  DATABASE_FLAGS,
  durationFlag,
  integerFlag,
  numberFlag,
  parseFlags,
} from './parse-flags.js'
import { fitDeadlinesToLease } from './pool-settings.js'
import { RelayHttpServer } from './relay-http.js'
import { createCliLogger, LOG_LEVELS, logRelayEvents } from './relay-log.js'
import { createReadiness, registerReadyGauge } from './relay-readiness.js'
import { resolveSettings } from './relay-settings.js'
import { readSecretFile } from './secret-file.js'
import { secretKeysFromEnv } from './secret-keys-env.js'
import { waitForDatabase } from './wait-for-database.js'

const FLAGS = {
  ...DATABASE_FLAGS,
  endpoint: { type: 'string' },
  secret: { type: 'string', multiple: true },
  subscription: { type: 'string', multiple: true },
  'allow-private-networks': { type: 'boolean' },
  concurrency: { type: 'string' },
  'batch-size': { type: 'string' },
  lease: { type: 'string' },
  'request-timeout': { type: 'string' },
  'poll-interval': { type: 'string' },
  'retry-schedule': { type: 'string' },
  'on-exhausted': { type: 'string' },
  listen: { type: 'boolean' },
  'stop-timeout': { type: 'string' },
  'log-format': { type: 'string' },
  'log-level': { type: 'string' },
  verbose: { type: 'boolean' },
  'metrics-port': { type: 'string' },
  'metrics-host': { type: 'string' },
  config: { type: 'string' },
  'secret-file': { type: 'string' },
  'database-url-file': { type: 'string' },
} as const

/**
 * Where the operations port listens by default: every IPv4 interface, as Prometheus exporters do, because a
 * pod's probes (the kubelet) and scrapes (Prometheus) come to the pod's IP, never to its loopback. It serves
 * counts and names of subscriptions, never a secret; `--metrics-host 127.0.0.1` keeps it local on a shared host.
 */
export const DEFAULT_METRICS_HOST = '0.0.0.0'

/** How long `/readyz` waits for the database's answer to `SELECT 1`: well inside a probe's usual 5 s. */
const READY_PING_TIMEOUT_MS = 2000

/** The readiness probe's own connection: one, apart from the relay's pool, so a busy pool never fails a probe. */
async function readinessPing(
  target: DatabaseTarget,
): Promise<{ ping: () => Promise<void>; close: () => Promise<void> }> {
  const { default: pg } = await import('pg')
  // Every deadline of the probe is its own: an answer later than READY_PING_TIMEOUT_MS is a failed probe.
  const pool = new pg.Pool({
    ...connectionConfig(target, 'outbox relay (readiness)', {
      ...target.deadlines.relay,
      connectTimeoutMs: READY_PING_TIMEOUT_MS,
      statementTimeoutMs: READY_PING_TIMEOUT_MS,
      queryTimeoutMs: READY_PING_TIMEOUT_MS,
    }),
    max: 1,
  })
  pool.on('error', () => {})
  pool.on('connect', (client) => client.on('error', () => {}))
  return {
    ping: async () => {
      await pool.query('SELECT 1')
    },
    close: () => pool.end().catch(() => {}),
  }
}

/**
 * The LISTEN connection through `connect` rather than `{ connectionString }`: the relay then holds no connection
 * string (with its password) in `relay.options`. The connection gets the relay profile's connect deadline and
 * keepalives (no statement deadline: it runs LISTEN and the heartbeat, whose own deadline catches a silent
 * network), and the heartbeat its `OUTBOX_LISTEN_HEARTBEAT_*` settings.
 */
function listenConnection(target: DatabaseTarget): ListenOption {
  const deadlines = target.deadlines.relay
  return {
    connect: async () => {
      const { default: pg } = await import('pg')
      const client = new pg.Client(
        connectionConfig(target, 'outbox relay (listen)', {
          ...deadlines,
          statementTimeoutMs: 0,
          queryTimeoutMs: deadlines.connectTimeoutMs,
          idleInTransactionTimeoutMs: 0,
        }),
      )
      client.on('error', () => {})
      try {
        await client.connect()
      } catch (error) {
        await client.end().catch(() => {})
        throw error
      }
      return client
    },
    heartbeatIntervalMs: deadlines.listenHeartbeatMs,
    heartbeatTimeoutMs: deadlines.listenHeartbeatTimeoutMs,
  }
}

/**
 * Secrets from `--secret` (repeatable) or `OUTBOX_SECRET` (`OUTBOX_SIGNING_SECRET`, its deprecated old name, is
 * still read), each possibly a comma-separated list.
 */
function signingSecrets(flag: readonly string[] | undefined, env: NodeJS.ProcessEnv): string[] {
  // whsec_ secrets are base64 and never contain a comma, so a comma can separate rotation keys in one variable.
  const split = (values: readonly string[]) =>
    values
      .flatMap((value) => value.split(','))
      .map((value) => value.trim())
      .filter(Boolean)
  if (flag !== undefined && flag.length > 0) return split(flag)
  if (env.OUTBOX_SECRET && env.OUTBOX_SIGNING_SECRET) {
    throw new UsageError('set OUTBOX_SECRET only: OUTBOX_SIGNING_SECRET is its deprecated old name')
  }
  return split([env.OUTBOX_SECRET || env.OUTBOX_SIGNING_SECRET || ''])
}

function retrySchedule(value: string | undefined): number[] | undefined {
  if (value === undefined) return undefined
  return value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => durationFlag(part, 'retry-schedule')!)
}

/**
 * Reads `--secret-file`/`OUTBOX_SECRET_FILE` and `--database-url-file`/`DATABASE_URL_FILE` into the variables the
 * rest of the command reads (a password typed in `--database-url` is refused by `resolveDatabase`).
 */
function withSecretFiles(
  typed: { readonly 'database-url'?: string | undefined; readonly secret?: readonly string[] | undefined },
  values: { readonly 'secret-file'?: string | undefined; readonly 'database-url-file'?: string | undefined },
  env: NodeJS.ProcessEnv,
): NodeJS.ProcessEnv {
  const typedUrl = typed['database-url']?.trim()
  const next = { ...env }
  const urlFile = values['database-url-file']?.trim()
  if (urlFile) {
    if (typedUrl || env.DATABASE_URL?.trim()) {
      throw new UsageError(
        'give the database URL once: --database-url-file (or DATABASE_URL_FILE), or DATABASE_URL / --database-url',
      )
    }
    next.DATABASE_URL = readSecretFile(urlFile, '--database-url-file')
  }
  const secretFile = values['secret-file']?.trim()
  if (secretFile) {
    if ((typed.secret?.length ?? 0) > 0 || env.OUTBOX_SECRET?.trim() || env.OUTBOX_SIGNING_SECRET?.trim()) {
      throw new UsageError(
        'give the signing secrets once: --secret-file (or OUTBOX_SECRET_FILE), or OUTBOX_SECRET',
      )
    }
    // One secret per line (or comma-separated): a rotation adds a line.
    next.OUTBOX_SECRET = readSecretFile(secretFile, '--secret-file')
      .split(/[\r\n,]+/)
      .map((line) => line.trim())
      .filter(Boolean)
      .join(',')
  }
  return next
}

/**
 * Creates the relay, which checks every option (endpoint URL, secrets, bounds, lease against timeout) before
 * anything runs; an option it refuses is reported under the flag the operator used.
 */
function constructRelay(
  { Relay }: Producer,
  options: RelayOptions,
  values: Readonly<Record<string, unknown>>,
): Relay {
  try {
    return new Relay(options)
  } catch (error) {
    const message = flagMessage(error, values)
    if (message === undefined) throw error
    throw new UsageError(message, { cause: error })
  }
}

/**
 * Stands in for a subscription name while the relay's options are checked before the database answers: a uuid
 * no subscription has, so the check of `--subscription` passes and every other flag is checked at once.
 */
const NAME_PLACEHOLDER = '00000000-0000-0000-0000-000000000000'

/**
 * The ids of `--subscription`'s entries: ids as given, names looked up (as every other subscription command takes
 * them); an unknown name is a usage error.
 */
async function subscriptionIds(
  producer: Producer,
  db: Kysely<any>,
  schema: string,
  refs: readonly string[],
): Promise<string[]> {
  const ids: string[] = []
  for (const ref of refs) {
    if (isUuid(ref)) {
      ids.push(ref)
      continue
    }
    const found = await producer.getSubscription(db, ref, { schema })
    if (found === undefined) {
      throw new UsageError(
        `--subscription: no subscription ${JSON.stringify(ref)} (see outbox subscriptions list)`,
      )
    }
    ids.push(found.id)
  }
  return ids
}

/** What the operator sees of the endpoint: no credentials, no query string (either may hold a token). */
function shownEndpoint(url: string): string {
  try {
    const parsed = new URL(url)
    return `${parsed.origin}${parsed.pathname}`
  } catch {
    return '(invalid URL)'
  }
}

/** Says so when a relay without an endpoint starts with no enabled stored subscription to serve: it would idle. */
async function warnWhenNothingServed(
  producer: Producer,
  db: Parameters<Producer['listSubscriptions']>[0],
  schema: string,
  ids: readonly string[] | undefined,
  log: Logger,
): Promise<void> {
  const enabled = (await producer.listSubscriptions(db, { schema })).filter(
    (subscription) =>
      !subscription.implicit &&
      subscription.state === 'enabled' &&
      (ids === undefined || ids.includes(subscription.id)),
  )
  if (enabled.length === 0) {
    log.warn(
      {},
      'no enabled stored subscription to serve: add one with outbox subscriptions create, or pass --endpoint <url>',
    )
  }
}

/**
 * `outbox relay`: delivers pending events until SIGINT/SIGTERM, then stops gracefully (finishes or aborts
 * in-flight requests, writes its marks and releases its claims) and exits 0.
 */
export async function relayCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const parsed = parseFlags('relay', argv, FLAGS)
  // Every flag also from OUTBOX_<FLAG> and from --config <file>: the command line wins, then the environment.
  const settings = resolveSettings(FLAGS, parsed.values, io.env)
  const values = settings.values as typeof parsed.values
  const env = withSecretFiles(parsed.values, values, settings.env)
  // Without an endpoint the relay serves the stored subscriptions (outbox subscriptions create).
  const endpoint = values.endpoint?.trim() || env.OUTBOX_ENDPOINT?.trim() || undefined
  // Ids or names; names are looked up once the database answers (subscriptionIds).
  const subscriptionRefs = values.subscription
    ?.flatMap((value) => value.split(','))
    .map((ref) => ref.trim())
    .filter(Boolean)
  let subscriptions = subscriptionRefs?.map((ref) => (isUuid(ref) ? ref : NAME_PLACEHOLDER))
  const namesGiven = subscriptionRefs?.some((ref) => !isUuid(ref)) ?? false
  const secrets = signingSecrets(values.secret, env)
  // Syntax only: the relay checks the bounds, and its errors are reported under these flags.
  const concurrency = numberFlag(values.concurrency)
  const batchSize = numberFlag(values['batch-size'])
  const leaseMs = durationFlag(values.lease, 'lease')
  const requestTimeoutMs = durationFlag(values['request-timeout'], 'request-timeout')
  const pollIntervalMs = durationFlag(values['poll-interval'], 'poll-interval')
  const onExhausted = values['on-exhausted'] as OnExhausted | undefined
  const stopTimeoutMs = durationFlag(values['stop-timeout'], 'stop-timeout') ?? DEFAULT_STOP_TIMEOUT_MS
  // Text for a person at a terminal; JSON lines for everything else (a container's or journald's log pipeline).
  const format =
    choiceFlag(values['log-format'], 'log-format', ['text', 'json']) ?? (io.stdout.isTTY ? 'text' : 'json')
  const level = choiceFlag(values['log-level'], 'log-level', LOG_LEVELS) ?? 'info'
  // A password typed in --database-url is refused there, naming the file the relay can also read the URL from.
  const database = resolveDatabase(
    values,
    env,
    'put it in DATABASE_URL or --database-url-file (a file holding the URL)',
  )
  const producer = await loadProducer()
  // The relay's statement deadlines never outlive its lease (see fitDeadlinesToLease).
  const target: DatabaseTarget = {
    ...database,
    deadlines: {
      ...database.deadlines,
      relay: fitDeadlinesToLease(
        database.deadlines.relay,
        leaseMs !== undefined && leaseMs > 0 ? leaseMs : producer.DEFAULT_LEASE_MS,
        env,
      ),
    },
  }
  const schedule = retrySchedule(values['retry-schedule'])
  const metricsPort = integerFlag(values['metrics-port'], 'metrics-port', 0, 65_535)
  const metricsHost = values['metrics-host']?.trim() || DEFAULT_METRICS_HOST
  const register =
    metricsPort === undefined
      ? undefined
      : await import('prom-client').then(({ Registry, collectDefaultMetrics }) => {
          const created = new Registry()
          collectDefaultMetrics({ register: created })
          return created
        })

  const log = createCliLogger(format, level, io.stdout)
  return await withDatabase(
    target,
    {
      // Its deadlines are the relay profile's (pool-settings.ts), within the lease: a claim whose answer never comes
      // (a silent network, a lock) fails rather than hanging the claim loop.
      applicationName: 'outbox relay',
      onIdleError: (error) =>
        log.warn(
          { error: explainDatabaseError(error, target) ?? error },
          'an idle database connection failed; the pool replaces it',
        ),
    },
    async (db) => {
      const listen: ListenOption = values.listen ? listenConnection(target) : false
      const optionsWith = (ids: readonly string[] | undefined): RelayOptions => ({
        db,
        endpoint,
        subscriptions: ids,
        allowPrivateNetworks: values['allow-private-networks'],
        secret: secrets.length > 0 ? secrets : undefined,
        // Only stored subscriptions' secrets are encrypted; a relay with an --endpoint reads none.
        secretKeys: endpoint === undefined ? secretKeysFromEnv(env) : undefined,
        concurrency,
        batchSize,
        leaseMs,
        requestTimeoutMs,
        pollIntervalMs,
        retrySchedule: schedule,
        onExhausted,
        schema: target.schema,
        listen,
        metrics: register === undefined ? undefined : { register },
        // The events below already give one line per occurrence; the relay's own diagnostics would repeat
        // them, so they are only shown with --verbose.
        logger: values.verbose ? log : silentLogger,
      })
      // Every flag is checked now, before any wait for the database; with names in --subscription this relay only
      // checks them (placeholders stand in for the names), and the one that runs is built once they are looked up.
      let relay = constructRelay(producer, optionsWith(subscriptions), values)
      const interrupt = catchInterrupt((signal) => {
        log.warn({}, `second ${signal}: exiting without releasing claims (they expire with their lease)`)
        process.exit(signalExitCode(signal))
      })
      let stopped: { lanes: number; aborted: number; unflushed: number } | undefined
      let server: RelayHttpServer | undefined
      let closePing: (() => Promise<void>) | undefined
      /** Why the relay has not started yet, while it waits for its database (`/readyz` says so). */
      let waitingFor: string | undefined
      try {
        if (register !== undefined) {
          const { ping, close } = await readinessPing(target)
          closePing = close
          const readiness = createReadiness({
            lastPassAt: () => relay.lastPassAt,
            stopping: () => interrupt.received !== undefined,
            waiting: () => waitingFor,
            ping,
            // A pass completes at least once a poll interval; one that has not for a whole lease is stuck (its
            // lanes' leases run out meanwhile and other relays take them).
            stallMs: Math.max(relay.options.leaseMs, 5 * relay.options.pollIntervalMs),
            timeoutMs: READY_PING_TIMEOUT_MS,
            explain: (error) =>
              explainDatabaseError(error, target) ?? (error instanceof Error ? error.message : String(error)),
          })
          registerReadyGauge(register, readiness)
          server = await RelayHttpServer.listen({
            host: metricsHost,
            port: metricsPort!,
            register,
            readiness,
          })
          log.info(
            { host: metricsHost, port: server.port, paths: '/metrics,/healthz,/readyz' },
            'serving metrics and probes',
          )
        }
        // One read up front, before anything is claimed: missing tables, a wrong password or a schema a newer
        // release migrated fail the command now, with one line, instead of a relay that reports it on every claim.
        // A database that is not up yet is waited for (the probes answer meanwhile: alive, not ready).
        const answered = await waitForDatabase({
          check: async () => {
            await producer.stats(db, { schema: target.schema })
            await checkSchemaNotNewer({ db, schema: target.schema })
            if (namesGiven && subscriptionRefs !== undefined) {
              subscriptions = await subscriptionIds(producer, db, target.schema, subscriptionRefs)
            }
          },
          explain: (error) =>
            explainDatabaseError(error, target) ?? (error instanceof Error ? error.message : String(error)),
          log,
          interrupt: interrupt.signal,
          onWaiting: (reason) => {
            waitingFor = reason
          },
        })
        if (!answered) {
          log.info({}, `${interrupt.received} received while waiting for the database: exiting`)
          return 0
        }
        if (namesGiven) relay = constructRelay(producer, optionsWith(subscriptions), values)
        logRelayEvents(relay, log, target)
        relay.on('relay:stopped', (result) => {
          stopped = result
        })
        await relay.start()
        const resolved = relay.options
        log.info(
          {
            ...(endpoint === undefined
              ? {
                  serving:
                    subscriptionRefs === undefined
                      ? 'every enabled stored subscription'
                      : subscriptionRefs.join(','),
                }
              : { endpoint: shownEndpoint(endpoint) }),
            database: `${target.where}/${target.database}`,
            schema: target.schema,
            concurrency: resolved.concurrency,
            batchSize: resolved.batchSize,
            leaseMs: resolved.leaseMs,
            requestTimeoutMs: resolved.requestTimeoutMs,
            maxAttempts: resolved.maxAttempts,
            onExhausted: resolved.onExhausted,
            signingSecrets: secrets.length,
            wakeUps: values.listen
              ? `LISTEN ${producer.notifyChannel(target.schema)} + polling every ${resolved.pollIntervalMs}ms`
              : `polling every ${resolved.pollIntervalMs}ms`,
          },
          'relay started',
        )
        // The relay warns through its logger, which the CLI keeps silent without --verbose; an operator must see
        // this one anyway, so the CLI says it itself then.
        if (endpoint !== undefined && secrets.length === 0 && !values.verbose) {
          log.warn({ signed: false }, UNSIGNED_WARNING)
        }
        if ((parsed.values.secret?.length ?? 0) > 0) {
          log.warn(
            {},
            '--secret shows in ps to every user of this machine: prefer OUTBOX_SECRET or --secret-file (a file holding the secrets)',
          )
        }
        if (endpoint === undefined)
          await warnWhenNothingServed(producer, db, target.schema, subscriptions, log)
        const signal = await interrupt.wait
        log.info(
          { stopTimeoutMs },
          `${signal} received: stopping (finishing in-flight requests, releasing claims)`,
        )
      } finally {
        await relay.stop({ timeoutMs: stopTimeoutMs })
        // Probes and the last scrape are answered until the drain is over (readiness says "stopping" meanwhile).
        await server?.close()
        await closePing?.()
        interrupt.dispose()
      }
      log.info({ ...stopped }, 'relay stopped')
      return 0
    },
  )
}
