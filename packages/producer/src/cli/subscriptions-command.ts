import type { Kysely } from 'kysely'
import type { CreateSubscriptionInput, Subscription, SubscriptionChanges } from '../index.js'
import { maskUrl } from '../mask-url.js'
import { cliActor } from './cli-actor.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { formatTable } from './format-text.js'
import { loadProducer, type Producer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { choiceFlag, DATABASE_FLAGS, durationFlag, numberFlag, parseFlags } from './parse-flags.js'
import { privateUrlHint } from './private-url-hint.js'
import { replayCommand } from './replay-command.js'
import { secretKeysFromEnv } from './secret-keys-env.js'

/** The flags that set a subscription's settings (create, update). */
const SETTING_FLAGS = {
  url: { type: 'string' },
  name: { type: 'string' },
  tenant: { type: 'string' },
  'all-tenants': { type: 'boolean' },
  'event-type': { type: 'string', multiple: true },
  'max-in-flight': { type: 'string' },
  rate: { type: 'string' },
  'retry-schedule': { type: 'string' },
  'request-timeout': { type: 'string' },
  'on-exhausted': { type: 'string' },
  json: { type: 'boolean' },
  actor: { type: 'string' },
} as const

/** Who a change is recorded under in the audit log: `--actor`, else the OS user. */
const ACTOR_FLAG = { actor: { type: 'string' } } as const

/** Prints full subscription URLs, query tokens and user-info included, in `list` and `show`. */
const SHOW_URLS_FLAG = { 'show-urls': { type: 'boolean' } } as const

/** Warns that a secret typed as a flag is on every user's `ps` while the command runs. */
function warnSecretFlag(io: CliIo, secret: string | undefined): void {
  if (secret !== undefined) {
    writeLine(
      io.stderr,
      'warning: --secret on the command line is shown by ps to every user of this machine: set OUTBOX_SECRET instead, or let the command generate one',
    )
  }
}

/** A subscription as `list` and `show` print it: its URL masked unless `--show-urls`. */
function shown(subscription: Subscription, showUrls: boolean | undefined): Subscription {
  if (showUrls || subscription.url === null) return subscription
  return { ...subscription, url: maskUrl(subscription.url) }
}

/** Settings `update --clear` may unset (back to every tenant, every type, the relay's defaults). */
const CLEARABLE: Readonly<Record<string, keyof SubscriptionChanges>> = {
  name: 'name',
  tenant: 'tenant',
  'event-type': 'eventTypes',
  'max-in-flight': 'maxInFlight',
  rate: 'ratePerSecond',
  'retry-schedule': 'retrySchedule',
  'request-timeout': 'requestTimeoutMs',
  'on-exhausted': 'onExhausted',
}

type SettingValues = {
  readonly [K in keyof typeof SETTING_FLAGS]?: (typeof SETTING_FLAGS)[K] extends { multiple: true }
    ? string[]
    : (typeof SETTING_FLAGS)[K]['type'] extends 'boolean'
      ? boolean
      : string
}

/** The settings typed on the command line, as the library takes them (it checks their bounds). */
function settingsOf(values: SettingValues): SubscriptionChanges {
  const settings: Record<string, unknown> = {}
  if (values.url !== undefined) settings.url = values.url
  if (values.name !== undefined) settings.name = values.name
  if (values.tenant !== undefined && values['all-tenants']) {
    throw new UsageError('give --tenant <name> or --all-tenants, not both')
  }
  if (values.tenant !== undefined) settings.tenant = values.tenant
  // '*' stated on purpose: every tenant's events (refused when left out once any subscription has a tenant).
  if (values['all-tenants']) settings.tenant = '*'
  if (values['event-type'] !== undefined) settings.eventTypes = values['event-type']
  if (values['max-in-flight'] !== undefined) settings.maxInFlight = numberFlag(values['max-in-flight'])
  if (values.rate !== undefined) settings.ratePerSecond = numberFlag(values.rate)
  if (values['request-timeout'] !== undefined) {
    settings.requestTimeoutMs = durationFlag(values['request-timeout'], 'request-timeout')
  }
  if (values['retry-schedule'] !== undefined) {
    settings.retrySchedule = values['retry-schedule']
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean)
      .map((part) => durationFlag(part, 'retry-schedule'))
  }
  if (values['on-exhausted'] !== undefined) {
    settings.onExhausted = choiceFlag(values['on-exhausted'], 'on-exhausted', ['skip', 'block'])
  }
  return settings
}

function describe(subscription: Subscription): string[][] {
  const or = (value: unknown, fallback: string) =>
    value === null || value === undefined ? fallback : String(value)
  return [
    ['id', subscription.id],
    ['name', or(subscription.name, '-')],
    ['url', subscription.implicit ? '(the relay --endpoint)' : or(subscription.url, '-')],
    ['state', subscription.state + (subscription.disabledReason ? ` (${subscription.disabledReason})` : '')],
    ['tenant', or(subscription.tenant, 'every tenant')],
    ['event types', subscription.eventTypes?.join(', ') ?? 'every type'],
    ['max in flight', or(subscription.maxInFlight, 'no limit')],
    ['rate', rateOf(subscription, 'no limit')],
    ['retry schedule', subscription.retrySchedule?.map((ms) => `${ms}ms`).join(',') ?? "the relay's"],
    [
      'request timeout',
      subscription.requestTimeoutMs === null ? "the relay's" : `${subscription.requestTimeoutMs}ms`,
    ],
    ['on exhausted', or(subscription.onExhausted, "the relay's")],
    [
      'secret',
      subscription.implicit
        ? '(the relay --secret)'
        : `set ${subscription.secretCreatedAt?.toISOString() ?? '-'}${
            subscription.secretOverlapEnds.length > 0
              ? `; previous signed with until ${subscription.secretOverlapEnds.map((end) => end.toISOString()).join(', ')}`
              : ''
          }`,
    ],
    ['endpoint', describeHealth(subscription)],
    [
      'dropped',
      subscription.dropped === 0
        ? '0'
        : `${subscription.dropped} pending deliveries, held disabled past the disabled retention (last ${subscription.lastDroppedAt?.toISOString() ?? '-'})`,
    ],
    ...(subscription.backfill === null ? [] : [['backfill', describeBackfill(subscription.backfill)]]),
    ['created', subscription.createdAt.toISOString()],
  ]
}

/** A subscription's rate as shown (`5/s`), or `none` when it has none. */
function rateOf(subscription: Subscription, none: string): string {
  return subscription.ratePerSecond === null ? none : `${subscription.ratePerSecond}/s`
}

/** A backfill's progress in one line (`startAt: 'earliest'`). */
function describeBackfill(backfill: NonNullable<Subscription['backfill']>): string {
  const counts = `${backfill.aggregatesDone}${backfill.aggregatesTotal === null ? '' : `/${backfill.aggregatesTotal}`} aggregates, ${backfill.events} events`
  if (backfill.state === 'done') {
    return `done ${backfill.finishedAt?.toISOString() ?? ''} (${counts})`
  }
  const waiting =
    backfill.waitingSince === null
      ? ''
      : `; waiting since ${backfill.waitingSince.toISOString()} for a transaction holding an aggregate`
  return `running since ${backfill.startedAt.toISOString()} (${counts} copied${waiting}); delivers once done`
}

/** The endpoint's breaker and throttle in one line. */
function describeHealth({ endpoint, implicit }: Subscription): string {
  if (implicit) return 'no breaker (the relay --endpoint)'
  const parts = [`breaker ${endpoint.breaker}`]
  if (endpoint.breaker !== 'closed' && endpoint.openedAt)
    parts.push(`since ${endpoint.openedAt.toISOString()}`)
  if (endpoint.breaker === 'open' && endpoint.nextProbeAt)
    parts.push(`next probe ${endpoint.nextProbeAt.toISOString()}`)
  if (endpoint.failureStreak > 0) parts.push(`${endpoint.failureStreak} failures in a row`)
  if (endpoint.throttledUntil)
    parts.push(`throttled until ${endpoint.throttledUntil.toISOString()} (Retry-After)`)
  return parts.join(', ')
}

function print(io: CliIo, json: boolean | undefined, subscription: Subscription): void {
  if (json) writeLine(io.stdout, JSON.stringify(subscription, null, 2))
  else for (const line of formatTable(describe(subscription))) writeLine(io.stdout, line)
}

/** The one positional argument naming the subscription (an id or a name). */
function refOf(action: string, positionals: readonly string[]): string {
  if (positionals.length !== 1) {
    throw new UsageError(
      `${action} takes one subscription id or name (see outbox subscriptions --help)${
        positionals.length > 1 ? `; got ${positionals.length}` : ''
      }`,
    )
  }
  return positionals[0]!
}

/** `outbox subscriptions …`: manage stored subscriptions (see its help page). */
export async function subscriptionsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [action, ...rest] = argv
  const command = `subscriptions ${action ?? ''}`.trim()
  const run = async <T>(
    values: Readonly<Record<string, unknown>>,
    work: (db: Kysely<any>, producer: Producer, schema: string) => Promise<T>,
  ): Promise<T> => {
    const target = resolveDatabase(values as never, io.env)
    const producer = await loadProducer()
    return await withFlagNames(values, () =>
      withDatabase(target, { applicationName: 'outbox subscriptions', max: 1 }, (db) =>
        work(db, producer, target.schema),
      ),
    )
  }
  switch (action) {
    case 'create': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        { ...DATABASE_FLAGS, ...SETTING_FLAGS, secret: { type: 'string' }, 'start-at': { type: 'string' } },
        true,
      )
      if (positionals.length > 0)
        throw new UsageError('create takes flags only, e.g. --url <url> (see outbox subscriptions --help)')
      if (values.url === undefined)
        throw new UsageError('create needs --url <url> (see outbox subscriptions --help)')
      warnSecretFlag(io, values.secret)
      const secret = values.secret ?? (io.env.OUTBOX_SECRET || undefined)
      const secretKeys = secretKeysFromEnv(io.env)
      const startAt =
        values['start-at'] === undefined
          ? undefined
          : choiceFlag(values['start-at'], 'start-at', ['now', 'earliest'])
      const created = await run(values, (db, producer, schema) =>
        producer.createSubscription(
          db,
          {
            ...(settingsOf(values) as CreateSubscriptionInput),
            ...(secret ? { secret } : {}),
            ...(startAt ? { startAt } : {}),
          },
          { schema, secretKeys, actor: cliActor(values.actor) },
        ),
      )
      // On stderr, so --json output stays one document.
      const hint = await privateUrlHint(values.url)
      if (hint !== undefined) writeLine(io.stderr, hint)
      if (values.json) writeLine(io.stdout, JSON.stringify(created))
      else {
        writeLine(io.stdout, `created subscription ${created.id}`)
        writeLine(io.stdout, `secret: ${created.secret}`)
        if (startAt === 'earliest') {
          writeLine(
            io.stderr,
            'backfilling every retained event first: relays copy them, then deliver (progress: outbox subscriptions show)',
          )
        }
        writeLine(
          io.stderr,
          'the secret is shown this once: hand it to the subscriber now (it verifies with it)',
        )
      }
      return 0
    }
    case 'list': {
      const { values } = parseFlags(command, rest, {
        ...DATABASE_FLAGS,
        ...SHOW_URLS_FLAG,
        tenant: { type: 'string' },
        json: { type: 'boolean' },
      })
      const listed = (
        await run(values, (db, producer, schema) =>
          producer.listSubscriptions(db, {
            schema,
            ...(values.tenant === undefined ? {} : { tenant: values.tenant }),
          }),
        )
      ).map((subscription) => shown(subscription, values['show-urls']))
      if (values.json) {
        writeLine(io.stdout, JSON.stringify(listed, null, 2))
        return 0
      }
      const header = ['ID', 'NAME', 'STATE', 'BREAKER', 'TENANT', 'EVENT TYPES', 'RATE', 'URL']
      const rows = listed.map((subscription) => [
        subscription.id,
        subscription.name ?? '-',
        subscription.backfill?.state === 'running'
          ? `${subscription.state}, backfilling ${subscription.backfill.aggregatesDone}${
              subscription.backfill.aggregatesTotal === null
                ? ''
                : `/${subscription.backfill.aggregatesTotal}`
            }`
          : subscription.state,
        subscription.implicit ? '-' : subscription.endpoint.breaker,
        subscription.tenant ?? '*',
        subscription.eventTypes?.join(',') ?? '*',
        rateOf(subscription, '-'),
        subscription.implicit ? '(relay --endpoint)' : (subscription.url ?? '-'),
      ])
      for (const line of formatTable([header, ...rows])) writeLine(io.stdout, line)
      return 0
    }
    case 'show': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        { ...DATABASE_FLAGS, ...SHOW_URLS_FLAG, json: { type: 'boolean' } },
        true,
      )
      const ref = refOf('show', positionals)
      const found: Subscription | undefined = await run(values, (db, producer, schema) =>
        producer.getSubscription(db, ref, { schema }),
      )
      if (!found)
        throw new UsageError(`no subscription ${JSON.stringify(ref)} (see outbox subscriptions list)`)
      print(io, values.json, shown(found, values['show-urls']))
      return 0
    }
    case 'update': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        { ...DATABASE_FLAGS, ...SETTING_FLAGS, clear: { type: 'string', multiple: true } },
        true,
      )
      const ref = refOf('update', positionals)
      const changes: Record<string, unknown> = { ...settingsOf(values) }
      for (const flag of values.clear ?? []) {
        const setting = CLEARABLE[flag.replace(/^--/, '')]
        if (!setting) {
          throw new UsageError(
            `--clear takes one of ${Object.keys(CLEARABLE).join(', ')}; got ${JSON.stringify(flag)}`,
          )
        }
        changes[setting] = null
      }
      const updated: Subscription = await run(values, (db, producer, schema) =>
        producer.updateSubscription(db, ref, changes, { schema, actor: cliActor(values.actor) }),
      )
      print(io, values.json, updated)
      return 0
    }
    case 'disable':
    case 'enable': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        { ...DATABASE_FLAGS, ...ACTOR_FLAG, reason: { type: 'string' }, json: { type: 'boolean' } },
        true,
      )
      const ref = refOf(action, positionals)
      const { reason } = values
      if (action === 'enable' && reason !== undefined) throw new UsageError('--reason goes with disable only')
      const changed: Subscription = await run(values, (db, producer, schema) =>
        action === 'disable'
          ? producer.disableSubscription(db, ref, {
              schema,
              actor: cliActor(values.actor),
              ...(reason === undefined ? {} : { reason }),
            })
          : producer.enableSubscription(db, ref, { schema, actor: cliActor(values.actor) }),
      )
      if (values.json) writeLine(io.stdout, JSON.stringify(changed, null, 2))
      else writeLine(io.stdout, `${changed.name ?? changed.id} is ${changed.state}`)
      return 0
    }
    case 'delete': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        { ...DATABASE_FLAGS, ...ACTOR_FLAG, yes: { type: 'boolean' }, json: { type: 'boolean' } },
        true,
      )
      const ref = refOf('delete', positionals)
      if (!values.yes) {
        throw new UsageError(
          `delete removes the subscription and every event recorded for it, pending ones included: add --yes to confirm (or disable it: outbox subscriptions disable ${ref})`,
        )
      }
      const result: { deleted: number; pendingDeleted: number } = await run(values, (db, producer, schema) =>
        producer.deleteSubscription(db, ref, { schema, actor: cliActor(values.actor) }),
      )
      if (values.json) writeLine(io.stdout, JSON.stringify(result))
      else
        writeLine(
          io.stdout,
          `deleted ${ref}: ${result.deleted} event rows, ${result.pendingDeleted} of them pending`,
        )
      return 0
    }
    case 'rotate-secret': {
      const { values, positionals } = parseFlags(
        command,
        rest,
        {
          ...DATABASE_FLAGS,
          ...ACTOR_FLAG,
          overlap: { type: 'string' },
          secret: { type: 'string' },
          json: { type: 'boolean' },
        },
        true,
      )
      const ref = refOf('rotate-secret', positionals)
      const overlapMs = durationFlag(values.overlap, 'overlap')
      warnSecretFlag(io, values.secret)
      const secret = values.secret ?? (io.env.OUTBOX_SECRET || undefined)
      const secretKeys = secretKeysFromEnv(io.env)
      const rotated: { secret: string } = await run(values, (db, producer, schema) =>
        producer.rotateSubscriptionSecret(db, ref, {
          schema,
          secretKeys,
          actor: cliActor(values.actor),
          ...(overlapMs === undefined ? {} : { overlapMs }),
          ...(secret ? { secret } : {}),
        }),
      )
      if (values.json) writeLine(io.stdout, JSON.stringify(rotated))
      else {
        writeLine(io.stdout, `secret: ${rotated.secret}`)
        writeLine(
          io.stderr,
          'the new secret is shown this once; requests carry both signatures until the overlap ends',
        )
      }
      return 0
    }
    case 'replay':
      return await replayCommand(command, rest, io)
    case undefined:
      throw new UsageError(
        'missing subcommand: outbox subscriptions create|list|show|update|disable|enable|delete|rotate-secret|replay (see outbox subscriptions --help)',
      )
    default:
      throw new UsageError(
        `unknown subcommand ${JSON.stringify(action)}: use outbox subscriptions create|list|show|update|disable|enable|delete|rotate-secret|replay (see outbox subscriptions --help)`,
      )
  }
}
