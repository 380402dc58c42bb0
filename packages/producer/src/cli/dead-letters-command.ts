import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { DeadLetter, RedrivenDelivery } from '../index.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { formatTable, truncate } from './format-text.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'

const ERROR_COLUMN_WIDTH = 60

/** The name an operator knows a subscription by; its id when it has none (or was deleted). */
function subscriptionLabel(dead: DeadLetter): string {
  return dead.subscriptionName ?? dead.subscriptionId
}

function row(dead: DeadLetter, withSubscription: boolean): string[] {
  return [
    dead.deadAt.toISOString(),
    ...(withSubscription ? [subscriptionLabel(dead)] : []),
    dead.eventId,
    `${dead.aggregateType}:${dead.aggregateId}`,
    String(dead.sequence),
    dead.eventType,
    String(dead.attempts),
    dead.lastStatus === null ? '-' : String(dead.lastStatus),
    truncate(dead.lastError ?? '', ERROR_COLUMN_WIDTH),
  ]
}

async function list(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('dead-letters list', argv, {
    ...DATABASE_FLAGS,
    json: { type: 'boolean' },
    limit: { type: 'string' },
    after: { type: 'string' },
    subscription: { type: 'string' },
  })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const target = resolveDatabase(values, io.env)
  const { listDeadLetters } = await loadProducer()
  const dead = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, (db) =>
      listDeadLetters(db, {
        limit,
        after: values.after,
        subscriptionId: values.subscription,
        schema: target.schema,
      }),
    ),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(dead, null, 2))
  } else if (dead.length === 0) {
    writeLine(io.stdout, values.after === undefined ? 'no dead letters' : 'no more dead letters')
  } else {
    // The subscription column appears once a dead letter is not the implicit subscription's: a single-endpoint
    // outbox's table stays as it was.
    const withSubscription = dead.some((one) => one.subscriptionId !== IMPLICIT_SUBSCRIPTION_ID)
    const header = [
      'DEAD AT',
      ...(withSubscription ? ['SUBSCRIPTION'] : []),
      'EVENT ID',
      'AGGREGATE',
      'SEQ',
      'TYPE',
      'ATTEMPTS',
      'LAST',
      'LAST ERROR',
    ]
    const rows = dead.map((one) => row(one, withSubscription))
    for (const line of formatTable([header, ...rows])) writeLine(io.stdout, line)
  }
  const last = dead.at(-1)
  if (dead.length === limit && last) {
    // On stderr, so `--json` output stays one document.
    const only = values.subscription === undefined ? '' : ` --subscription ${values.subscription}`
    writeLine(
      io.stderr,
      `more may follow: outbox dead-letters list${only} --limit ${limit} --after ${last.cursor}`,
    )
  }
  return 0
}

async function redriveDeadLetters(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(
    'dead-letters redrive',
    argv,
    {
      ...DATABASE_FLAGS,
      all: { type: 'boolean' },
      json: { type: 'boolean' },
      subscription: { type: 'string' },
    },
    true,
  )
  if (values.all && positionals.length > 0) {
    throw new UsageError('give event ids or --all, not both (see outbox dead-letters redrive --help)')
  }
  if (!values.all && positionals.length === 0) {
    throw new UsageError('give the event ids to redrive, or --all (see outbox dead-letters redrive --help)')
  }
  const eventIds = [...new Set(positionals.map((id) => id.trim().toLowerCase()))]
  const target = resolveDatabase(values, io.env)
  const { redrive } = await loadProducer()
  const scope = { subscriptionId: values.subscription, schema: target.schema }
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, (db) =>
      redrive(db, values.all ? { all: true, ...scope } : { eventIds, ...scope }),
    ),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(result))
    return 0
  }
  if (result.redriven.length === 0) {
    writeLine(
      io.stdout,
      !values.all
        ? 'nothing redriven'
        : values.subscription === undefined
          ? 'nothing to redrive: there are no dead letters'
          : 'nothing to redrive: this subscription has no dead letters',
    )
  } else {
    writeLine(
      io.stdout,
      `redriven ${result.redriven.length} (pending again, same event id and sequence, attempts reset):`,
    )
    for (const line of redrivenLines(result.redriven, result.deliveries)) writeLine(io.stdout, line)
  }
  if (result.notDead.length > 0) {
    writeLine(
      io.stdout,
      `not dead letters, left unchanged (unknown, pending or already sent): ${result.notDead.length}`,
    )
    for (const id of result.notDead) writeLine(io.stdout, `  ${id}`)
  }
  return 0
}

/**
 * One line per redriven event; an event revived in stored subscriptions names them (by id, as `--subscription`
 * takes them), so a single-endpoint outbox's output stays as it was.
 */
function redrivenLines(redriven: readonly string[], deliveries: readonly RedrivenDelivery[]): string[] {
  return redriven.map((eventId) => {
    const stored = deliveries
      .filter((one) => one.eventId === eventId && one.subscriptionId !== IMPLICIT_SUBSCRIPTION_ID)
      .map((one) => one.subscriptionId)
    const implicit = deliveries.some(
      (one) => one.eventId === eventId && one.subscriptionId === IMPLICIT_SUBSCRIPTION_ID,
    )
    if (stored.length === 0) return `  ${eventId}`
    return `  ${eventId}  subscription ${[...(implicit ? ['default'] : []), ...stored].join(', ')}`
  })
}

/** `outbox dead-letters list|redrive`: inspect dead letters and send them again. */
export async function deadLettersCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv
  if (sub === 'list') return await list(rest, io)
  if (sub === 'redrive') return await redriveDeadLetters(rest, io)
  if (sub === undefined) {
    throw new UsageError(
      'missing subcommand: outbox dead-letters list|redrive (see outbox dead-letters --help)',
    )
  }
  throw new UsageError(
    `unknown subcommand ${JSON.stringify(sub)}: use outbox dead-letters list|redrive (see outbox dead-letters --help)`,
  )
}
