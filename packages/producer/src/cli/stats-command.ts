import { clearScreenDown, moveCursor } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { OutboxStats, StatsFigures, SubscriptionStats } from '../index.js'
import { DEFAULT_WATCH_INTERVAL_MS, MIN_WATCH_INTERVAL_MS } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { explainDatabaseError } from './describe-error.js'
import { formatSeconds, formatTable } from './format-text.js'
import { catchInterrupt } from './interrupt.js'
import { loadProducer } from './load-producer.js'
import { type DatabaseTarget, resolveDatabase, withDatabase } from './open-database.js'
import { DATABASE_FLAGS, disabledRetentionFlag, durationFlag, parseFlags } from './parse-flags.js'

const FLAGS = {
  ...DATABASE_FLAGS,
  json: { type: 'boolean' },
  watch: { type: 'boolean' },
  interval: { type: 'string' },
  'disabled-retention': { type: 'string' },
} as const

function table(snapshot: OutboxStats, strugglingAttempts: number): string[] {
  const hint = (count: number, text: string) => (count > 0 ? text : '')
  return formatTable([
    ['lag', formatSeconds(snapshot.lagSeconds), 'age of the oldest undelivered event'],
    ['pending', String(snapshot.pending), 'events not delivered yet'],
    ['in flight', String(snapshot.inFlight), 'lanes a relay holds right now'],
    [
      'struggling',
      String(snapshot.struggling),
      hint(snapshot.struggling, `lane heads that failed ${strugglingAttempts}+ times`),
    ],
    [
      'suspect',
      String(snapshot.suspect),
      hint(snapshot.suspect, 'heads whose relays died sending them: each is sent alone'),
    ],
    ['dead', String(snapshot.dead), hint(snapshot.dead, 'see: outbox dead-letters list')],
    [
      'blocked',
      String(snapshot.blocked),
      hint(snapshot.blocked, 'lanes parked by a 409 or --on-exhausted block'),
    ],
  ])
}

/**
 * The per-subscription rows are shown only when there is more than the implicit subscription: a single-endpoint
 * outbox's output stays as it was before subscriptions.
 */
function perSubscription(snapshot: OutboxStats): readonly SubscriptionStats[] {
  const { subscriptions } = snapshot
  const onlyImplicit =
    subscriptions.length === 0 ||
    (subscriptions.length === 1 && subscriptions[0]!.id === IMPLICIT_SUBSCRIPTION_ID)
  return onlyImplicit ? [] : subscriptions
}

function subscriptionTable(snapshot: OutboxStats): string[] {
  const rows = perSubscription(snapshot)
  if (rows.length === 0) return []
  // Shown once the disabled retention has dropped anything, so the usual table stays as narrow as it was.
  const anyDropped = rows.some((sub) => sub.dropped > 0)
  const header = [
    'SUBSCRIPTION',
    'STATE',
    'BREAKER',
    'TENANT',
    'LAG',
    'PENDING',
    'IN FLIGHT',
    'STRUGGLING',
    'DEAD',
    'BLOCKED',
    ...(anyDropped ? ['DROPPED'] : []),
  ]
  return [
    '',
    ...formatTable([
      header,
      ...rows.map((sub) => [
        sub.name ?? sub.id,
        sub.state,
        sub.breaker,
        sub.tenant ?? '-',
        formatSeconds(sub.lagSeconds),
        String(sub.pending),
        String(sub.inFlight),
        String(sub.struggling),
        String(sub.dead),
        String(sub.blocked),
        ...(anyDropped ? [String(sub.dropped)] : []),
      ]),
    ]),
  ]
}

/** `key=value` pairs of the figures, as one line of `--watch` output. */
function pairs(figures: StatsFigures): string {
  return FIGURES.map((key) => {
    const value = figures[key]
    return `${key}=${key === 'lagSeconds' ? Number(value.toFixed(3)) : value}`
  }).join(' ')
}

const FIGURES: readonly (keyof StatsFigures)[] = [
  'lagSeconds',
  'pending',
  'inFlight',
  'struggling',
  'suspect',
  'dead',
  'blocked',
]

/** The totals on one line, then (with stored subscriptions) one line per subscription. */
function lines(snapshot: OutboxStats, time: string): string[] {
  return [
    `${time} ${pairs(snapshot)}`,
    ...perSubscription(snapshot).map(
      (sub) =>
        `${time} subscription=${sub.name ?? sub.id} state=${sub.state} ${pairs(sub)}${sub.dropped > 0 ? ` dropped=${sub.dropped}` : ''}`,
    ),
  ]
}

/** `outbox stats`: the outbox's health once, or continuously with `--watch`. */
export async function statsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('stats', argv, FLAGS)
  if (values.interval !== undefined && !values.watch) {
    throw new UsageError('--interval only applies with --watch (see outbox stats --help)')
  }
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const intervalMs = durationFlag(values.interval, 'interval')
  if (intervalMs !== undefined && intervalMs < MIN_WATCH_INTERVAL_MS) {
    throw new UsageError(`--interval must be at least ${MIN_WATCH_INTERVAL_MS}ms, got ${values.interval}`)
  }
  const disabledRetention = disabledRetentionFlag(values['disabled-retention'])
  return await withDatabase(target, { applicationName: 'outbox stats', max: 1 }, async (db) => {
    const read = () => producer.stats(db, { schema: target.schema, disabledRetention })
    const render = (snapshot: OutboxStats) => [
      ...table(snapshot, producer.STRUGGLING_ATTEMPTS),
      ...subscriptionTable(snapshot),
    ]
    if (!values.watch) {
      const snapshot = await read()
      if (values.json) writeLine(io.stdout, JSON.stringify(snapshot))
      else for (const row of render(snapshot)) writeLine(io.stdout, row)
      warn(snapshot, io)
      return 0
    }
    await watch(read, render, target, intervalMs ?? DEFAULT_WATCH_INTERVAL_MS, Boolean(values.json), io)
    return 0
  })
}

/** The snapshot's warnings, on stderr so that stdout stays the figures (and one JSON document with --json). */
function warn(snapshot: OutboxStats, io: CliIo): void {
  for (const warning of snapshot.warnings) writeLine(io.stderr, `warning: ${warning}`)
}

async function watch(
  read: () => Promise<OutboxStats>,
  render: (snapshot: OutboxStats) => string[],
  target: DatabaseTarget,
  intervalMs: number,
  json: boolean,
  io: CliIo,
): Promise<void> {
  const redraw = io.stdout.isTTY === true && !json
  const interrupt = catchInterrupt()
  let drawn = 0
  let first = true
  try {
    while (!interrupt.signal.aborted) {
      const time = new Date()
      let snapshot: OutboxStats | undefined
      let failure: string | undefined
      try {
        snapshot = await read()
      } catch (error) {
        // A bad URL or missing tables show on the first read: fail then. Later, an outage is something to watch
        // through, so it is reported and the next refresh tries again.
        if (first) throw error
        failure = explainDatabaseError(error, target) ?? String((error as Error)?.message ?? error)
      }
      first = false
      if (interrupt.signal.aborted) break
      if (redraw) {
        const frame = [
          `outbox stats · ${target.database} · schema ${target.schema} · every ${formatSeconds(intervalMs / 1000)} · ${time.toLocaleTimeString()} (Ctrl-C to stop)`,
          '',
          ...(snapshot
            ? [...render(snapshot), ...snapshot.warnings.map((warning) => `warning: ${warning}`)]
            : [`unavailable: ${failure} (retrying)`]),
        ]
        if (drawn > 0) {
          moveCursor(io.stdout, 0, -drawn)
          clearScreenDown(io.stdout)
        }
        for (const row of frame) writeLine(io.stdout, row)
        drawn = frame.length
      } else if (snapshot) {
        if (json) writeLine(io.stdout, JSON.stringify({ time: time.toISOString(), ...snapshot }))
        else for (const row of lines(snapshot, time.toISOString())) writeLine(io.stdout, row)
        warn(snapshot, io)
      } else {
        writeLine(io.stderr, `${time.toISOString()} stats unavailable: ${failure} (retrying)`)
      }
      await sleep(intervalMs, undefined, { signal: interrupt.signal }).catch(() => {})
    }
  } finally {
    interrupt.dispose()
  }
}
