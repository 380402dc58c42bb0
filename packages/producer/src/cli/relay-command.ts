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
import { resolveDatabase, withDatabase } from './open-database.js'
import { flagMessage } from './option-flags.js'
import {
  choiceFlag,
  DATABASE_FLAGS,
  durationFlag,
  integerFlag,
  numberFlag,
  parseFlags,
} from './parse-flags.js'
import { listenSettings } from './pool-settings.js'
import { createCliLogger, LOG_LEVELS, logRelayEvents } from './relay-log.js'

const FLAGS = {
  ...DATABASE_FLAGS,
  endpoint: { type: 'string' },
  secret: { type: 'string', multiple: true },
  subscription: { type: 'string', multiple: true },
  'allow-private-networks': { type: 'boolean' },
  concurrency: { type: 'string' },
  'batch-size': { type: 'string' },
  'lease-ms': { type: 'string' },
  'request-timeout-ms': { type: 'string' },
  'poll-interval-ms': { type: 'string' },
  'retry-schedule': { type: 'string' },
  'on-exhausted': { type: 'string' },
  listen: { type: 'boolean' },
  'stop-timeout-ms': { type: 'string' },
  'log-format': { type: 'string' },
  'log-level': { type: 'string' },
  verbose: { type: 'boolean' },
} as const

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
      'no enabled stored subscription to serve: add one with outbox subscriptions add, or pass --endpoint <url>',
    )
  }
}

/**
 * `outbox relay`: delivers pending events until SIGINT/SIGTERM, then stops gracefully (finishes or aborts
 * in-flight requests, writes its marks and releases its claims) and exits 0.
 */
export async function relayCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('relay', argv, FLAGS)
  // Without an endpoint the relay serves the stored subscriptions (outbox subscriptions add).
  const endpoint = values.endpoint?.trim() || io.env.OUTBOX_ENDPOINT?.trim() || undefined
  const subscriptions = values.subscription?.flatMap((value) => value.split(',')).map((id) => id.trim())
  const secrets = signingSecrets(values.secret, io.env)
  // Syntax only: the relay checks the bounds, and its errors are reported under these flags.
  const concurrency = numberFlag(values.concurrency)
  const batchSize = numberFlag(values['batch-size'])
  const leaseMs = numberFlag(values['lease-ms'])
  const requestTimeoutMs = numberFlag(values['request-timeout-ms'])
  const pollIntervalMs = numberFlag(values['poll-interval-ms'])
  const onExhausted = values['on-exhausted'] as OnExhausted | undefined
  const stopTimeoutMs =
    integerFlag(values['stop-timeout-ms'], 'stop-timeout-ms', 0) ?? DEFAULT_STOP_TIMEOUT_MS
  const format = choiceFlag(values['log-format'], 'log-format', ['text', 'json']) ?? 'text'
  const level = choiceFlag(values['log-level'], 'log-level', LOG_LEVELS) ?? 'info'
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const schedule = retrySchedule(values['retry-schedule'])

  const log = createCliLogger(format, level, io.stdout)
  return await withDatabase(
    target,
    {
      applicationName: 'outbox relay',
      onIdleError: (error) =>
        log.warn(
          { error: explainDatabaseError(error, target) ?? error },
          'an idle database connection failed; the pool replaces it',
        ),
    },
    async (db) => {
      const listen: ListenOption = values.listen ? listenSettings(target.url, target.deadlines.relay) : false
      const options: RelayOptions = {
        db,
        endpoint,
        subscriptions,
        allowPrivateNetworks: values['allow-private-networks'],
        secret: secrets.length > 0 ? secrets : undefined,
        concurrency,
        batchSize,
        leaseMs,
        requestTimeoutMs,
        pollIntervalMs,
        retrySchedule: schedule,
        onExhausted,
        schema: target.schema,
        listen,
        // The events below already give one line per occurrence; the relay's own diagnostics would repeat
        // them, so they are only shown with --verbose.
        logger: values.verbose ? log : silentLogger,
      }
      const relay = constructRelay(producer, options, values)
      logRelayEvents(relay, log, target)
      // One read up front: an unreachable database or missing tables fail the command now, with one line,
      // instead of a relay that retries forever.
      await producer.stats(db, { schema: target.schema })
      // And a schema a newer release migrated fails it too, rather than a relay reporting it on every claim.
      await checkSchemaNotNewer({ db, schema: target.schema })

      const interrupt = catchInterrupt((signal) => {
        log.warn({}, `second ${signal}: exiting without releasing claims (they expire with their lease)`)
        process.exit(signalExitCode(signal))
      })
      let stopped: { lanes: number; aborted: number; unflushed: number } | undefined
      relay.on('relay:stopped', (result) => {
        stopped = result
      })
      try {
        await relay.start()
        const resolved = relay.options
        log.info(
          {
            ...(endpoint === undefined
              ? {
                  serving:
                    subscriptions === undefined
                      ? 'every enabled stored subscription'
                      : subscriptions.join(','),
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
        if (endpoint === undefined)
          await warnWhenNothingServed(producer, db, target.schema, subscriptions, log)
        const signal = await interrupt.wait
        log.info(
          { stopTimeoutMs },
          `${signal} received: stopping (finishing in-flight requests, releasing claims)`,
        )
      } finally {
        await relay.stop({ timeoutMs: stopTimeoutMs })
        interrupt.dispose()
      }
      log.info({ ...stopped }, 'relay stopped')
      return 0
    },
  )
}
