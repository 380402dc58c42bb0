import { clearLine, cursorTo } from 'node:readline'
import { cliActor } from './cli-actor.js'
import { EXIT_PRUNE_NOT_CAUGHT_UP } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { catchInterrupt, signalExitCode } from './interrupt.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import {
  DATABASE_FLAGS,
  disabledRetentionFlag,
  durationFlag,
  integerFlag,
  parseFlags,
} from './parse-flags.js'
import { createCliLogger } from './relay-log.js'

const FLAGS = {
  ...DATABASE_FLAGS,
  retention: { type: 'string' },
  'dead-letter-retention': { type: 'string' },
  'delivery-log-retention': { type: 'string' },
  'disabled-retention': { type: 'string' },
  'batch-size': { type: 'string' },
  'max-batches': { type: 'string' },
  pause: { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean' },
} as const

/**
 * `outbox prune`: bounded, batched deletion of sent events (and optionally dead letters and the delivery log) past
 * retention, and — only with `--disabled-retention` — drops of what disabled subscriptions held past it.
 */
export async function pruneCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('prune', argv, FLAGS)
  if (values.retention === undefined) {
    throw new UsageError('missing --retention, e.g. --retention 30d (see outbox prune --help)')
  }
  const batchSize = integerFlag(values['batch-size'], 'batch-size', 1, 1_000_000)
  const maxBatches = integerFlag(values['max-batches'], 'max-batches', 1)
  const pauseMs = durationFlag(values.pause, 'pause', { maxMs: 3_600_000 })
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const { DEFAULT_OUTBOX_PRUNE_MAX_BATCHES, prune } = producer
  const retention = durationFlag(values.retention, 'retention')!
  const deadLetterRetention = durationFlag(values['dead-letter-retention'], 'dead-letter-retention')
  const deliveryLogRetention = durationFlag(values['delivery-log-retention'], 'delivery-log-retention')
  const disabledRetention = disabledRetentionFlag(values['disabled-retention'])

  const progressInPlace = io.stderr.isTTY === true
  const removedBy = { sent: 0, dead: 0, 'delivery-log': 0, disabled: 0 }
  const batches = { sent: 0, dead: 0, 'delivery-log': 0, disabled: 0 }
  const interrupt = catchInterrupt()
  try {
    const result = await withFlagNames(values, () =>
      withDatabase(target, { applicationName: 'outbox prune', max: 1 }, (db) =>
        prune(db, {
          retention,
          deadLetterRetention,
          deliveryLogRetention,
          disabledRetention,
          actor: cliActor(values.actor),
          batchSize,
          maxBatches,
          pauseMs,
          schema: target.schema,
          signal: interrupt.signal,
          // A drop loses events a customer never received: always said, on stderr beside the progress lines.
          logger: createCliLogger('text', 'warn', io.stderr),
          onBatch({ status, removed }) {
            removedBy[status] += removed
            batches[status] += 1
            const what =
              status === 'disabled' ? 'held deliveries of disabled subscriptions' : `${status} rows`
            const text = `prune: ${what}: batch ${batches[status]}, ${removed} ${status === 'disabled' ? 'dropped' : 'deleted'}, ${removedBy[status]} so far`
            if (progressInPlace) {
              cursorTo(io.stderr, 0)
              clearLine(io.stderr, 0)
              io.stderr.write(text)
            } else {
              writeLine(io.stderr, text)
            }
          },
        }),
      ),
    )
    if (progressInPlace && batches.sent + batches.dead + batches['delivery-log'] + batches.disabled > 0) {
      writeLine(io.stderr)
    }
    const interrupted = interrupt.received
    if (values.json) {
      writeLine(
        io.stdout,
        JSON.stringify({
          ...result,
          sent: removedBy.sent,
          dead: removedBy.dead,
          // Only when asked for: the document stays as it was for those who do not prune the log.
          ...(deliveryLogRetention === undefined ? {} : { deliveryLog: removedBy['delivery-log'] }),
        }),
      )
    } else {
      const log = deliveryLogRetention === undefined ? '' : `, ${removedBy['delivery-log']} delivery log`
      const drops =
        result.dropped === 0
          ? ''
          : `; dropped ${result.dropped} pending deliveries of disabled subscriptions past the disabled retention`
      const counts = `deleted ${result.removed} rows (${removedBy.sent} sent, ${removedBy.dead} dead letters${log})${drops}`
      if (result.caughtUp) writeLine(io.stdout, `${counts}; caught up`)
      else if (interrupted)
        writeLine(io.stdout, `${counts}; interrupted by ${interrupted}: run it again to finish`)
      else {
        writeLine(
          io.stdout,
          `${counts}; NOT caught up: stopped after --max-batches ${maxBatches ?? DEFAULT_OUTBOX_PRUNE_MAX_BATCHES}; run it again, more often, or raise --max-batches`,
        )
      }
    }
    if (interrupted) return signalExitCode(interrupted)
    return result.caughtUp ? 0 : EXIT_PRUNE_NOT_CAUGHT_UP
  } finally {
    interrupt.dispose()
  }
}
