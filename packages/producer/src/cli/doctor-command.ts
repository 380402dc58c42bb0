import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { IntegrityReport, LaneRepairResult, RepairReport } from '../index.js'
import { cliActor } from './cli-actor.js'
import { DEFAULT_DOCTOR_LIMIT, EXIT_VIOLATIONS } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { formatTable } from './format-text.js'
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

const FLAGS = {
  ...DATABASE_FLAGS,
  json: { type: 'boolean' },
  repair: { type: 'boolean' },
  'max-lease': { type: 'string' },
  'overdue-after': { type: 'string' },
  limit: { type: 'string' },
  actor: { type: 'string' },
  'disabled-retention': { type: 'string' },
} as const

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`
}

/**
 * A lane as an operator reads it: `order:42`, followed by its subscription's name when it is not the implicit one
 * (a single-endpoint outbox's report stays as it was). A rule about the aggregate as a whole has no subscription.
 */
function laneLabel(lane: {
  readonly subscriptionId: string | null
  readonly subscriptionName: string | null
  readonly aggregateType: string
  readonly aggregateId: string
}): string {
  const aggregate = `${lane.aggregateType}:${lane.aggregateId}`
  if (lane.subscriptionId === null || lane.subscriptionId === IMPLICIT_SUBSCRIPTION_ID) return aggregate
  return `${aggregate} (subscription ${lane.subscriptionName ?? lane.subscriptionId})`
}

/** The report as an operator reads it: violations, then findings apart (they fail nothing), then one summary. */
function reportLines(report: IntegrityReport): string[] {
  const lines: string[] = []
  if (report.violations.length > 0) {
    lines.push('violations:')
    const rows = report.violations.map((v) => [v.kind, laneLabel(v), v.detail])
    for (const row of formatTable(rows)) lines.push(`  ${row}`)
  }
  if (report.findings.length > 0) {
    lines.push('findings (not violations):')
    const rows = report.findings.map((f) => [f.kind, laneLabel(f), f.detail])
    for (const row of formatTable(rows)) lines.push(`  ${row}`)
  }
  lines.push(summary(report))
  return lines
}

function summary(report: IntegrityReport): string {
  const findings =
    report.findings.length === 0
      ? ''
      : `; ${plural(report.findings.length, 'overdue head')} no relay holds (is a relay running?)`
  if (report.ok) return `no violations${findings}`
  const lanes = new Set(
    report.violations.map((v) => JSON.stringify([v.subscriptionId, v.aggregateType, v.aggregateId])),
  )
  // lease_too_long is the one rule a repair leaves alone, so the advice depends on what is left.
  const repairable = report.violations.some((v) => v.kind !== 'lease_too_long')
  const advice = [
    repairable ? 'run outbox doctor --repair' : '',
    report.violations.some((v) => v.kind === 'lease_too_long')
      ? "check --max-lease against your relays' --lease (a repair never shortens a lease)"
      : '',
  ]
    .filter(Boolean)
    .join('; ')
  return `${plural(report.violations.length, 'violation')} on ${plural(lanes.size, 'lane')}: ${advice}${findings}`
}

function laneRow(lane: LaneRepairResult): string[] {
  const what =
    lane.outcome === 'skipped'
      ? lane.reason
      : lane.actions.length > 0
        ? lane.actions.join('; ')
        : 'nothing left to do (it was mended meanwhile)'
  return [lane.outcome, laneLabel(lane), lane.kinds.join(','), what]
}

function repairLines(repair: RepairReport): string[] {
  const skipped = repair.lanes.filter((lane) => lane.outcome === 'skipped').length
  const lines =
    repair.lanes.length === 0
      ? ['nothing to repair']
      : [
          `repaired ${plural(repair.lanes.length - skipped, 'lane')}, skipped ${skipped}:`,
          ...formatTable(repair.lanes.map(laneRow)).map((row) => `  ${row}`),
        ]
  return [...lines, 'after the repair:', ...reportLines(repair.after)]
}

/** The report's warnings (a disabled subscription holding events), on stderr so `--json` stays one document. */
function warn(report: IntegrityReport, io: CliIo): void {
  for (const warning of report.warnings) writeLine(io.stderr, `warning: ${warning}`)
}

/**
 * Every rule reports at most `limit` lanes: a report that reached it may be cut short. On stderr, so `--json`
 * stays one document.
 */
function warnIfCut(report: IntegrityReport, limit: number, io: CliIo): void {
  const perKind = new Map<string, number>()
  for (const v of report.violations) perKind.set(v.kind, (perKind.get(v.kind) ?? 0) + 1)
  if (report.findings.length >= limit || [...perKind.values()].some((count) => count >= limit)) {
    writeLine(
      io.stderr,
      `more may follow: at most ${limit} lanes are listed per rule; raise --limit to see more`,
    )
  }
}

/**
 * `outbox doctor`: checks the outbox's liveness rules (exit 0 clean, {@link EXIT_VIOLATIONS} when one is broken),
 * and with `--repair` mends what it can, lane by lane, then checks again.
 */
export async function doctorCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('doctor', argv, FLAGS)
  const maxLeaseMs = durationFlag(values['max-lease'], 'max-lease', { minMs: 1 })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_DOCTOR_LIMIT
  const target = resolveDatabase(values, io.env)
  const producer = await loadProducer()
  const overdueAfterMs = durationFlag(values['overdue-after'], 'overdue-after')
  // parseDuration accepts 0 (a retention may be), but a head is never overdue by nothing: the library would
  // refuse it only after connecting.
  if (overdueAfterMs !== undefined && overdueAfterMs < 1) {
    throw new UsageError(
      `--overdue-after must be at least 1ms, got ${JSON.stringify(values['overdue-after'])}`,
    )
  }
  if (values.actor !== undefined && !values.repair) {
    throw new UsageError('--actor names who repairs: it goes with --repair (a check records nothing)')
  }
  const disabledRetention = disabledRetentionFlag(values['disabled-retention'])
  const options = { schema: target.schema, maxLeaseMs, overdueAfterMs, limit, disabledRetention }
  // Two connections: the check reads the violations and the overdue heads at the same time.
  return await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox doctor', max: 2 }, async (db) => {
      if (values.repair) {
        const repair = await producer.repairIntegrity(db, { ...options, actor: cliActor(values.actor) })
        if (values.json) writeLine(io.stdout, JSON.stringify(repair))
        else for (const line of repairLines(repair)) writeLine(io.stdout, line)
        warn(repair.after, io)
        warnIfCut(repair.after, limit, io)
        return repair.after.ok ? 0 : EXIT_VIOLATIONS
      }
      const report = await producer.checkIntegrity(db, options)
      if (values.json) writeLine(io.stdout, JSON.stringify(report))
      else for (const line of reportLines(report)) writeLine(io.stdout, line)
      warn(report, io)
      warnIfCut(report, limit, io)
      return report.ok ? 0 : EXIT_VIOLATIONS
    }),
  )
}
