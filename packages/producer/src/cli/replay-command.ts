import { clearLine, cursorTo } from 'node:readline'
import type { ReplayProgress, ReplayResult } from '../index.js'
import { cliActor } from './cli-actor.js'
import { EXIT_PRUNE_NOT_CAUGHT_UP } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { catchInterrupt, signalExitCode } from './interrupt.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, durationFlag, integerFlag, parseFlags } from './parse-flags.js'

const FLAGS = {
  ...DATABASE_FLAGS,
  since: { type: 'string' },
  until: { type: 'string' },
  'batch-size': { type: 'string' },
  'lease-wait': { type: 'string' },
  json: { type: 'boolean' },
  actor: { type: 'string' },
} as const

const DURATION = /^\d+(\.\d+)?\s*(ms|s|m|h|d|w)?$/

/** A point in time as typed: a duration meaning "that long ago" (`2h`), or an ISO-8601 time. */
function timeFlag(value: string | undefined, flag: string): Date | number | undefined {
  if (value === undefined) return undefined
  if (DURATION.test(value.trim())) return durationFlag(value, flag)
  const time = Date.parse(value)
  if (Number.isNaN(time)) {
    throw new UsageError(
      `--${flag} must be how long ago (2h, 7d, 90m) or an ISO time (2026-12-01T09:00:00Z), got ${JSON.stringify(value)}`,
    )
  }
  return new Date(time)
}

/**
 * `outbox subscriptions replay <subscription> --since 2h`: sends one subscription's events again, in order, with
 * their ids and sequences. Progress goes to stderr while it runs, the summary to stdout.
 */
export async function replayCommand(command: string, argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(command, argv, FLAGS, true)
  if (positionals.length !== 1) {
    throw new UsageError(
      'replay takes one subscription id or name, e.g. outbox subscriptions replay acme --since 2h (see outbox subscriptions --help)',
    )
  }
  const ref = positionals[0]!
  if (values.since === undefined) {
    throw new UsageError('replay needs --since, e.g. --since 2h or --since 2026-12-01T09:00:00Z')
  }
  const since = timeFlag(values.since, 'since')!
  const until = timeFlag(values.until, 'until')
  const batchSize = integerFlag(values['batch-size'], 'batch-size', 1, 10_000)
  const leaseWaitMs = durationFlag(values['lease-wait'], 'lease-wait')
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()

  const progressInPlace = io.stderr.isTTY === true
  let reported = false
  const onProgress = ({ aggregates, events, pendingLeased }: ReplayProgress) => {
    reported = true
    const waiting = pendingLeased > 0 ? `, ${pendingLeased} lanes waiting for a relay's lease` : ''
    const text = `replay: ${events} events of ${aggregates} aggregates pending again${waiting}`
    if (progressInPlace) {
      cursorTo(io.stderr, 0)
      clearLine(io.stderr, 0)
      io.stderr.write(text)
    } else {
      writeLine(io.stderr, text)
    }
  }
  const interrupt = catchInterrupt()
  try {
    const result: ReplayResult = await withFlagNames(values, () =>
      withDatabase(target, { applicationName: 'outbox subscriptions replay', max: 1 }, (db) =>
        producer.replay(db, {
          subscriptionId: ref,
          since,
          ...(until === undefined ? {} : { until }),
          ...(batchSize === undefined ? {} : { batchSize }),
          ...(leaseWaitMs === undefined ? {} : { leaseWaitMs }),
          onProgress,
          signal: interrupt.signal,
          schema: target.schema,
          actor: cliActor(values.actor),
        }),
      ),
    )
    if (progressInPlace && reported) writeLine(io.stderr)
    const interrupted = interrupt.received
    if (values.json) writeLine(io.stdout, JSON.stringify(result))
    else {
      const counts = `replayed ${result.events} events of ${result.aggregates} aggregates to ${ref}`
      if (result.complete) writeLine(io.stdout, `${counts}; relays send them again in order`)
      else if (interrupted)
        writeLine(
          io.stdout,
          `${counts}; interrupted by ${interrupted}: run it again to finish (what went out already goes again)`,
        )
      else {
        writeLine(
          io.stdout,
          `${counts}; ${result.skippedLeased} lanes stayed under a relay's lease: run it again, or with a longer --lease-wait (what went out already goes again)`,
        )
      }
    }
    if (interrupted) return signalExitCode(interrupted)
    return result.complete ? 0 : EXIT_PRUNE_NOT_CAUGHT_UP
  } finally {
    interrupt.dispose()
  }
}
