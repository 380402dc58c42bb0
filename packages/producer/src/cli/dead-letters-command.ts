import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type {
  DeadLetter,
  DeadLetterDetail,
  DiscardResult,
  RedrivenDelivery,
  RedriveOptions,
} from '../index.js'
import { cliActor } from './cli-actor.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { CliError, UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import {
  DEAD_LETTER_FILTER_FLAGS,
  filterFromFlags,
  hasFilterFlags,
  subscriptionFromFlag,
} from './dead-letter-filter-flags.js'
import { escapeControls, formatTable, truncate } from './format-text.js'
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
    ...DEAD_LETTER_FILTER_FLAGS,
    json: { type: 'boolean' },
    limit: { type: 'string' },
    after: { type: 'string' },
  })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const filter = filterFromFlags(values)
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const dead = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      return await producer.listDeadLetters(db, {
        ...filter,
        limit,
        after: values.after,
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
        schema: target.schema,
      })
    }),
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
    // On stderr, so `--json` output stays one document; the filters are repeated so the next page keeps them.
    const filters = Object.keys(DEAD_LETTER_FILTER_FLAGS)
      .filter((flag) => values[flag as keyof typeof values] !== undefined)
      .map((flag) => ` --${flag} ${shellWord(String(values[flag as keyof typeof values]))}`)
      .join('')
    writeLine(
      io.stderr,
      `more may follow: outbox dead-letters list${filters} --limit ${limit} --after ${last.cursor}`,
    )
  }
  return 0
}

/** A flag value as a shell word: as it is when it is plain, else single-quoted. */
function shellWord(value: string): string {
  return /^[\w.:/@*+-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`
}

async function redriveDeadLetters(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(
    'dead-letters redrive',
    argv,
    {
      ...DATABASE_FLAGS,
      ...DEAD_LETTER_FILTER_FLAGS,
      all: { type: 'boolean' },
      json: { type: 'boolean' },
      'dry-run': { type: 'boolean' },
      actor: { type: 'string' },
    },
    true,
  )
  // --subscription scopes ids and --all as it always did; with neither, it is a filter like the others.
  const { subscription: _scope, ...narrowing } = values
  const filtered = hasFilterFlags(narrowing)
  if (values.all && positionals.length > 0) {
    throw new UsageError('give event ids or --all, not both (see outbox dead-letters redrive --help)')
  }
  if ((values.all || positionals.length > 0) && filtered) {
    throw new UsageError(
      'give event ids, --all or filters (--tenant, --event-type, --aggregate, --status, --since, --until), not several (see outbox dead-letters redrive --help)',
    )
  }
  const byFilter = filtered || (!values.all && positionals.length === 0 && values.subscription !== undefined)
  if (!values.all && positionals.length === 0 && !byFilter) {
    throw new UsageError(
      'give the event ids to redrive, or --all, or filters such as --event-type or --status (see outbox dead-letters redrive --help)',
    )
  }
  const eventIds = [...new Set(positionals.map((id) => id.trim().toLowerCase()))]
  const filter = filterFromFlags(values)
  const dryRun = values['dry-run'] === true
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      const scope = {
        dryRun,
        actor: cliActor(values.actor),
        schema: target.schema,
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
      }
      const form: RedriveOptions = byFilter
        ? { filter, ...scope }
        : values.all
          ? { all: true, ...scope }
          : { eventIds, ...scope }
      return await producer.redrive(db, form)
    }),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(result))
    return 0
  }
  if (result.redriven.length === 0) {
    writeLine(
      io.stdout,
      byFilter
        ? 'nothing to redrive: no dead letter matches these filters'
        : !values.all
          ? 'nothing redriven'
          : values.subscription === undefined
            ? 'nothing to redrive: there are no dead letters'
            : 'nothing to redrive: this subscription has no dead letters',
    )
  } else if (dryRun) {
    writeLine(io.stdout, `would redrive ${result.redriven.length} (dry run, nothing changed):`)
    for (const line of redrivenLines(result.redriven, result.deliveries)) writeLine(io.stdout, line)
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

async function discard(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(
    'dead-letters discard',
    argv,
    {
      ...DATABASE_FLAGS,
      ...DEAD_LETTER_FILTER_FLAGS,
      json: { type: 'boolean' },
      'dry-run': { type: 'boolean' },
      unblock: { type: 'boolean' },
      actor: { type: 'string' },
    },
    true,
  )
  const { subscription: _scope, ...narrowing } = values
  const filtered = hasFilterFlags(narrowing)
  if (positionals.length > 0 && filtered) {
    throw new UsageError(
      'give event ids or filters (--tenant, --event-type, --aggregate, --status, --since, --until), not both (see outbox dead-letters discard --help)',
    )
  }
  const byFilter = positionals.length === 0
  if (byFilter && !hasFilterFlags(values)) {
    // Never everything by accident: a discard names what it deletes.
    throw new UsageError(
      'give the event ids to discard, or filters such as --event-type or --status; discard never deletes every dead letter at once (see outbox dead-letters discard --help)',
    )
  }
  const eventIds = [...new Set(positionals.map((id) => id.trim().toLowerCase()))]
  const filter = filterFromFlags(values)
  const dryRun = values['dry-run'] === true
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      const scope = {
        dryRun,
        unblockLanes: values.unblock === true,
        actor: cliActor(values.actor),
        schema: target.schema,
      }
      return await producer.discardDeadLetters(
        db,
        byFilter
          ? { filter: { ...filter, ...(subscriptionId === undefined ? {} : { subscriptionId }) }, ...scope }
          : { eventIds, ...scope, ...(subscriptionId === undefined ? {} : { subscriptionId }) },
      )
    }),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(result))
    return 0
  }
  for (const line of discardLines(result)) writeLine(io.stdout, line)
  return 0
}

/** What a discard did (or would do), for the operator. */
function discardLines(result: DiscardResult): string[] {
  const lines: string[] = []
  const would = result.dryRun ? 'would ' : ''
  if (result.discarded.length === 0) {
    lines.push('nothing to discard: no dead letter matches')
  } else {
    lines.push(
      result.dryRun
        ? `would discard ${result.discarded.length} (dry run, nothing changed):`
        : `discarded ${result.discarded.length} (deleted for good):`,
    )
    for (const one of result.discarded) {
      lines.push(
        one.subscriptionId === IMPLICIT_SUBSCRIPTION_ID
          ? `  ${one.eventId}`
          : `  ${one.eventId}  subscription ${one.subscriptionId}`,
      )
    }
  }
  if (result.unblocked.length > 0) {
    lines.push(`${would}resume ${result.unblocked.length} lane(s) as if their dead letter had been skipped:`)
    for (const lane of result.unblocked) {
      lines.push(
        `  ${escapeControls(`${lane.aggregateType}/${lane.aggregateId}`)} of subscription ${lane.subscriptionId}: ${lane.released} event(s) ${result.dryRun ? 'to release' : 'released'}`,
      )
    }
  }
  if (result.notDead.length > 0) {
    lines.push(
      `not dead letters, left unchanged (unknown, pending or already sent): ${result.notDead.length}`,
    )
    for (const id of result.notDead) lines.push(`  ${id}`)
  }
  return lines
}

async function show(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(
    'dead-letters show',
    argv,
    { ...DATABASE_FLAGS, subscription: { type: 'string' }, json: { type: 'boolean' } },
    true,
  )
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0
        ? 'give the event id to show (see outbox dead-letters show --help)'
        : 'give one event id to show (see outbox dead-letters show --help)',
    )
  }
  const eventId = positionals[0]!.trim()
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const dead = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      return await producer.getDeadLetter(db, {
        eventId,
        schema: target.schema,
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
      })
    }),
  )
  if (!dead) {
    throw new CliError(
      `no dead letter ${eventId}${values.subscription === undefined ? '' : ` in subscription ${values.subscription}`} (unknown, pending or already sent; see outbox dead-letters list)`,
    )
  }
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(dead, null, 2))
    return 0
  }
  for (const line of detailLines(dead)) writeLine(io.stdout, line)
  return 0
}

/** The detail view: fields, then the last error, the last answer and the payload, escaped (subscriber text). */
function detailLines(dead: DeadLetterDetail): string[] {
  const field = (name: string, value: string) => `${name.padEnd(14)}${escapeControls(value)}`
  return [
    field('event', dead.eventId),
    field(
      'subscription',
      dead.subscriptionName === null
        ? dead.subscriptionId
        : `${dead.subscriptionName} (${dead.subscriptionId})`,
    ),
    field('tenant', dead.tenant ?? '-'),
    field('aggregate', `${dead.aggregateType}/${dead.aggregateId}  sequence ${dead.sequence}`),
    field('type', dead.eventType),
    field('attempts', String(dead.attempts)),
    field('last status', dead.lastStatus === null ? '- (no HTTP answer)' : String(dead.lastStatus)),
    field('last attempt', dead.lastAttemptAt?.toISOString() ?? '-'),
    field('dead at', dead.deadAt.toISOString()),
    field(
      'blocks lane',
      dead.blocksLane ? 'yes: redrive it to resume the lane, or discard it with --unblock to skip it' : 'no',
    ),
    field('last error', dead.lastError ?? '-'),
    field('last answer', dead.lastAnswer ?? '- (none in the delivery log)'),
    'payload:',
    ...JSON.stringify(dead.payload, null, 2)
      .split('\n')
      .map((line) => `  ${escapeControls(line)}`),
  ]
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

/** `outbox dead-letters list|show|redrive|discard`: inspect dead letters, send them again or delete them. */
export async function deadLettersCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv
  if (sub === 'list') return await list(rest, io)
  if (sub === 'show') return await show(rest, io)
  if (sub === 'redrive') return await redriveDeadLetters(rest, io)
  if (sub === 'discard') return await discard(rest, io)
  if (sub === undefined) {
    throw new UsageError(
      'missing subcommand: outbox dead-letters list|show|redrive|discard (see outbox dead-letters --help)',
    )
  }
  throw new UsageError(
    `unknown subcommand ${JSON.stringify(sub)}: use outbox dead-letters list|show|redrive|discard (see outbox dead-letters --help)`,
  )
}
