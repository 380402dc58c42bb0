import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { LaneState, LaneSummary } from '../index.js'
import { type AggregateRef, aggregateFlag } from './aggregate-flag.js'
import { cliActor } from './cli-actor.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { subscriptionFromFlag } from './dead-letter-filter-flags.js'
import { formatTable, truncate } from './format-text.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { choiceFlag, DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'

const ERROR_COLUMN_WIDTH = 50
const STATES: readonly LaneState[] = ['blocked', 'struggling', 'leased']

/** The lane's `--aggregate <type>/<id>`, which `unblock` and `skip-head` require. */
function laneAggregate(value: string | undefined): AggregateRef {
  const aggregate = aggregateFlag(value)
  if (aggregate === undefined) {
    throw new UsageError('missing --aggregate <type>/<id>, e.g. --aggregate order/42 (see outbox lanes list)')
  }
  return aggregate
}

/** `order/42`, followed by the subscription when it is not the implicit one. */
function laneLabel(lane: LaneSummary): string {
  const aggregate = `${lane.aggregateType}/${lane.aggregateId}`
  if (lane.subscriptionId === IMPLICIT_SUBSCRIPTION_ID) return aggregate
  return `${aggregate} (${lane.subscriptionName ?? lane.subscriptionId})`
}

function row(lane: LaneSummary): string[] {
  // A lane blocked as exhausted has a head that never failed: what an operator needs is its blocker's failure.
  const failure = lane.blocker ?? lane.head
  const since = lane.state === 'leased' ? lane.leasedUntil : lane.blockedAt
  return [
    laneLabel(lane),
    lane.reason ?? lane.state,
    lane.blocker === null ? '-' : String(lane.blocker.sequence),
    lane.head === null ? '-' : String(lane.head.sequence),
    lane.head?.eventType ?? '-',
    lane.head === null ? '-' : String(lane.head.attempts),
    String(lane.pending),
    failure?.lastStatus == null ? '-' : String(failure.lastStatus),
    truncate(failure?.lastError ?? '', ERROR_COLUMN_WIDTH) || '-',
    since === null ? '-' : since.toISOString(),
  ]
}

async function list(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('lanes list', argv, {
    ...DATABASE_FLAGS,
    state: { type: 'string' },
    subscription: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
  })
  if (values.state === undefined) {
    throw new UsageError(`missing --state ${STATES.join('|')} (see outbox lanes list --help)`)
  }
  const state = choiceFlag(values.state, 'state', STATES)!
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const lanes = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox lanes', max: 1 }, async (db) => {
      const subscriptionId = await subscriptionFromFlag(producer, db, values.subscription, target.schema)
      return await producer.listLanes(db, {
        state,
        limit,
        schema: target.schema,
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
      })
    }),
  )
  if (values.json) {
    writeLine(io.stdout, JSON.stringify(lanes, null, 2))
    return 0
  }
  if (lanes.length === 0) {
    writeLine(io.stdout, `no ${state} lanes`)
    return 0
  }
  const since = state === 'leased' ? 'LEASED UNTIL' : 'BLOCKED SINCE'
  const header = ['LANE', 'REASON', 'BLOCKER', 'HEAD', 'TYPE', 'ATTEMPTS', 'PENDING', 'LAST', 'ERROR', since]
  for (const line of formatTable([header, ...lanes.map(row)])) writeLine(io.stdout, line)
  if (lanes.length === limit) {
    writeLine(io.stderr, `more may follow: at most ${limit} lanes are listed; raise --limit to see more`)
  }
  return 0
}

const ACTION_FLAGS = {
  ...DATABASE_FLAGS,
  subscription: { type: 'string' },
  aggregate: { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean' },
} as const

async function unblock(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('lanes unblock', argv, ACTION_FLAGS)
  const aggregate = laneAggregate(values.aggregate)
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox lanes', max: 1 }, async (db) => {
      const subscriptionId =
        (await subscriptionFromFlag(producer, db, values.subscription, target.schema)) ??
        IMPLICIT_SUBSCRIPTION_ID
      return await producer.unblockLane(db, {
        subscriptionId,
        ...aggregate,
        actor: cliActor(values.actor),
        schema: target.schema,
      })
    }),
  )
  if (values.json) writeLine(io.stdout, JSON.stringify(result))
  else if (result.outcome === 'resumed') {
    writeLine(
      io.stdout,
      `unblocked ${aggregate.aggregateType}/${aggregate.aggregateId}: ${result.released} event(s) behind the blocker are due now, in order; the blocker ${result.blockerEventId ?? '(gone)'} stays a dead letter (outbox dead-letters redrive ${result.blockerEventId ?? '<id>'} sends it again)`,
    )
  } else {
    writeLine(
      io.stdout,
      `cleared the 409 park of ${aggregate.aggregateType}/${aggregate.aggregateId}: its head and ${Math.max(0, result.released - 1)} event(s) behind it are due now`,
    )
  }
  return 0
}

async function skipHead(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('lanes skip-head', argv, { ...ACTION_FLAGS, reason: { type: 'string' } })
  const aggregate = laneAggregate(values.aggregate)
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox lanes', max: 1 }, async (db) => {
      const subscriptionId =
        (await subscriptionFromFlag(producer, db, values.subscription, target.schema)) ??
        IMPLICIT_SUBSCRIPTION_ID
      return await producer.skipLaneHead(db, {
        subscriptionId,
        ...aggregate,
        actor: cliActor(values.actor),
        schema: target.schema,
        ...(values.reason === undefined ? {} : { reason: values.reason }),
      })
    }),
  )
  if (values.json) writeLine(io.stdout, JSON.stringify(result))
  else {
    writeLine(
      io.stdout,
      `skipped ${aggregate.aggregateType}/${aggregate.aggregateId} sequence ${result.sequence} (event ${result.eventId}, now a dead letter: outbox dead-letters redrive ${result.eventId} sends it again); ${result.released} event(s) behind it are due now`,
    )
  }
  return 0
}

/**
 * `outbox lanes list|unblock|skip-head`: finds the lanes that need an operator (blocked, struggling, leased) and
 * unblocks one or gives up on its head; each action is recorded in the audit log under `--actor`.
 */
export async function lanesCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv
  if (sub === 'list') return await list(rest, io)
  if (sub === 'unblock') return await unblock(rest, io)
  if (sub === 'skip-head') return await skipHead(rest, io)
  if (sub === undefined) {
    throw new UsageError('missing subcommand: outbox lanes list|unblock|skip-head (see outbox lanes --help)')
  }
  throw new UsageError(
    `unknown subcommand ${JSON.stringify(sub)}: use outbox lanes list, unblock or skip-head (see outbox lanes --help)`,
  )
}
