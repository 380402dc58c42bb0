import type { DeadLetter } from '../index.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { formatTable, truncate } from './format-text.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'

const ERROR_COLUMN_WIDTH = 60

function row(dead: DeadLetter): string[] {
  return [
    dead.deadAt.toISOString(),
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
  })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const target = resolveDatabase(values, io.env)
  const { listDeadLetters } = await loadProducer()
  const dead = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, (db) =>
      listDeadLetters(db, { limit, after: values.after, schema: target.schema }),
    ),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(dead, null, 2))
  } else if (dead.length === 0) {
    writeLine(io.stdout, values.after === undefined ? 'no dead letters' : 'no more dead letters')
  } else {
    const header = ['DEAD AT', 'EVENT ID', 'AGGREGATE', 'SEQ', 'TYPE', 'ATTEMPTS', 'LAST', 'LAST ERROR']
    for (const line of formatTable([header, ...dead.map(row)])) writeLine(io.stdout, line)
  }
  const last = dead.at(-1)
  if (dead.length === limit && last) {
    // On stderr, so `--json` output stays one document.
    writeLine(io.stderr, `more may follow: outbox dead-letters list --limit ${limit} --after ${last.cursor}`)
  }
  return 0
}

async function redriveDeadLetters(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(
    'dead-letters redrive',
    argv,
    { ...DATABASE_FLAGS, all: { type: 'boolean' }, json: { type: 'boolean' } },
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
  const result = await withDatabase(target, { applicationName: 'outbox dead-letters', max: 1 }, (db) =>
    redrive(db, values.all ? { all: true, schema: target.schema } : { eventIds, schema: target.schema }),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(result))
    return 0
  }
  if (result.redriven.length === 0) {
    writeLine(io.stdout, values.all ? 'nothing to redrive: there are no dead letters' : 'nothing redriven')
  } else {
    writeLine(
      io.stdout,
      `redriven ${result.redriven.length} (pending again, same event id and sequence, attempts reset):`,
    )
    for (const id of result.redriven) writeLine(io.stdout, `  ${id}`)
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
