import { isUuid } from '@outbox/protocol'
import type { DeliveryAttempt, ListDeliveryAttemptsOptions } from '../index.js'
import { aggregateFlag } from './aggregate-flag.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { subscriptionFromFlag } from './dead-letter-filter-flags.js'
import { formatTable, truncate } from './format-text.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'

const ANSWER_COLUMN_WIDTH = 60

function row(attempt: DeliveryAttempt, names: ReadonlyMap<string, string>): string[] {
  const said = attempt.error ?? attempt.answer ?? ''
  return [
    attempt.attemptedAt.toISOString(),
    names.get(attempt.subscriptionId) ?? attempt.subscriptionId,
    attempt.eventId,
    `${attempt.aggregateType}/${attempt.aggregateId}`,
    String(attempt.sequence),
    attempt.outcome,
    attempt.httpStatus === null ? '-' : String(attempt.httpStatus),
    attempt.durationMs === null ? '-' : String(attempt.durationMs),
    truncate(said, ANSWER_COLUMN_WIDTH),
  ]
}

async function list(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('deliveries list', argv, {
    ...DATABASE_FLAGS,
    subscription: { type: 'string' },
    event: { type: 'string' },
    aggregate: { type: 'string' },
    json: { type: 'boolean' },
    limit: { type: 'string' },
    after: { type: 'string' },
  })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const aggregate = aggregateFlag(values.aggregate)
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  if (values.event !== undefined && !isUuid(values.event)) {
    throw new UsageError(`--event takes an event id (a uuid); got ${JSON.stringify(values.event)}`)
  }
  const { attempts, names } = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox deliveries', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      const options: ListDeliveryAttemptsOptions = {
        limit,
        schema: target.schema,
        ...(aggregate ?? {}),
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
        ...(values.event === undefined ? {} : { eventId: values.event }),
        ...(values.after === undefined ? {} : { after: values.after }),
      }
      const attempts = await producer.listDeliveryAttempts(db, options)
      // Names read the table once, for the text table only: JSON keeps the ids.
      const names = new Map<string, string>()
      if (!values.json && attempts.length > 0) {
        for (const one of await producer.listSubscriptions(db, { schema: target.schema })) {
          if (one.name !== null) names.set(one.id, one.name)
        }
      }
      return { attempts, names }
    }),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(attempts, null, 2))
  } else if (attempts.length === 0) {
    writeLine(io.stdout, values.after === undefined ? 'no delivery attempts' : 'no more delivery attempts')
  } else {
    const header = [
      'ATTEMPTED AT',
      'SUBSCRIPTION',
      'EVENT ID',
      'AGGREGATE',
      'SEQ',
      'OUTCOME',
      'HTTP',
      'MS',
      'ANSWER / ERROR',
    ]
    for (const line of formatTable([header, ...attempts.map((one) => row(one, names))])) {
      writeLine(io.stdout, line)
    }
  }
  const last = attempts.at(-1)
  if (attempts.length === limit && last) {
    // On stderr, so `--json` output stays one document; the filters are repeated so the next page keeps them.
    const filters = argv.filter((arg, index) => {
      const flag = arg.split('=')[0]
      const previous = argv[index - 1]?.split('=')[0]
      return !['--limit', '--after', '--json'].includes(flag!) && !['--limit', '--after'].includes(previous!)
    })
    writeLine(
      io.stderr,
      `more may follow: outbox deliveries list ${[...filters, '--limit', String(limit), '--after', last.cursor].join(' ')}`,
    )
  }
  return 0
}

/** `outbox deliveries list`: the delivery log, newest first — what to open when a subscriber says it got nothing. */
export async function deliveriesCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv
  if (sub === 'list') return await list(rest, io)
  if (sub === undefined) {
    throw new UsageError('missing subcommand: outbox deliveries list (see outbox deliveries --help)')
  }
  throw new UsageError(
    `unknown subcommand ${JSON.stringify(sub)}: use outbox deliveries list (see outbox deliveries --help)`,
  )
}
