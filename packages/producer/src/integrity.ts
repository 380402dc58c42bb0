import type { Kysely } from 'kysely'
import { actorOption, recordAudit } from './audit.js'
import { backfillWarning } from './backfill-warning.js'
import type { Duration } from './duration.js'
import { invalidOption } from './errors.js'
import { DEFAULT_LEASE_MS } from './options.js'
import { disabledRetentionOption, pausedSubscriptionWarning } from './paused-subscription.js'
import { resolveSchema } from './schema-name.js'
import { findOverdueHeads, findViolations } from './sql/find-violations.js'
import { type LaneRepair, repairLane } from './sql/repair-lane.js'
import { selectPausedBacklogs } from './sql/select-paused-backlogs.js'
import { selectRunningBackfills } from './sql/select-running-backfills.js'

/** The liveness rules {@link checkIntegrity} checks; each names a way an aggregate could stop moving silently. */
export type IntegrityViolationKind =
  /** Pending events with no lane row: no claim can ever take them. */
  | 'pending_without_lane'
  /** The lane's head waits at `'infinity'` and no dead letter below it blocks the lane (nothing will make it due). */
  | 'head_not_due'
  /** A pending event at `'infinity'` in a lane that is not blocked: it becomes a head that is never due. */
  | 'row_at_infinity'
  /** Blocked by an exhausted event under `'block'`, but no dead letter is left to redrive (it was pruned). */
  | 'blocked_without_dead_letter'
  /** Parked by a 409 with nothing pending. */
  | 'conflict_without_pending'
  /** Parked by a 409 while its head was last answered something else: reported blocked when it is not. */
  | 'stale_conflict_marker'
  /** A lease ending later than `maxLeaseMs` from now: longer than any relay takes, so the lane waits too long. */
  | 'lease_too_long'
  /**
   * The aggregate's sequence counter is missing or below one of its sequences: the next enqueue would fail. About
   * the aggregate, not one lane: its `subscriptionId` is null.
   */
  | 'counter_behind'
  /** Pending events of a subscription that does not exist (deleted, but its rows left behind): no relay serves them. */
  | 'orphaned_subscription'

/**
 * A broken liveness rule on one lane: one subscription's view of one aggregate. Every rule is checked per lane, so
 * a violation in one subscription's lane says nothing about another subscription's lane of the same aggregate.
 */
export interface IntegrityViolation {
  readonly kind: IntegrityViolationKind
  /**
   * The lane's subscription (the nil uuid for the implicit one); null for `counter_behind`, which is about the
   * aggregate's sequence counter, shared by every subscription.
   */
  readonly subscriptionId: string | null
  /** The subscription's name (`default` for the implicit one); null with no subscription, a nameless or a missing one. */
  readonly subscriptionName: string | null
  readonly aggregateType: string
  readonly aggregateId: string
  /** What was found, for a person. */
  readonly detail: string
}

/**
 * Something worth a look that breaks no rule: a head due for longer than `overdueAfterMs` whose lane no live lease
 * holds — what an outbox with no relay running (or relays far behind) looks like.
 */
export interface IntegrityFinding {
  readonly kind: 'overdue_head'
  /** The lane's subscription (the nil uuid for the implicit one). */
  readonly subscriptionId: string
  /** The subscription's name (`default` for the implicit one); null for a stored one without a name. */
  readonly subscriptionName: string | null
  readonly aggregateType: string
  readonly aggregateId: string
  readonly detail: string
  readonly eventId: string
  readonly sequence: number
  readonly overdueSeconds: number
}

/** What {@link checkIntegrity} found. */
export interface IntegrityReport {
  /** True when no rule is broken (findings do not count). */
  readonly ok: boolean
  readonly violations: readonly IntegrityViolation[]
  readonly findings: readonly IntegrityFinding[]
  /**
   * Things an operator should act on that break no rule, for a person: a disabled stored subscription holding
   * pending events (no relay claims them, they hold back pruning, and a prune run with a disabled retention drops
   * those held past it: the warning says from when) or that lost some to the disabled retention, and a subscription whose
   * backfill (`startAt: 'earliest'`) runs (it delivers nothing until the copy is done; a stalled copy says since
   * when). The heads of either are not reported as overdue.
   */
  readonly warnings: readonly string[]
}

/** Options of {@link checkIntegrity}. */
export interface CheckIntegrityOptions {
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** The longest lease your relays take (their `leaseMs`); a longer one is a violation. @defaultValue 60000 */
  readonly maxLeaseMs?: number
  /** A head due for longer than this with no relay holding it is reported as a finding. @defaultValue 300000 */
  readonly overdueAfterMs?: number
  /** Most lanes reported per rule (and findings), so a damaged large outbox gives a bounded report. @defaultValue 100 */
  readonly limit?: number
  /**
   * The disabled retention your `prune` runs with, if it runs with one, so a warning about a disabled subscription
   * can say when its held deliveries start to be dropped. @defaultValue false (prune keeps them, as by default)
   */
  readonly disabledRetention?: Duration | false
}

/** Default of {@link CheckIntegrityOptions.overdueAfterMs}: 5 minutes. */
export const DEFAULT_OVERDUE_AFTER_MS = 300_000

function positive(value: number | undefined, fallback: number, name: string): number {
  const resolved = value ?? fallback
  if (!Number.isSafeInteger(resolved) || resolved <= 0) {
    throw invalidOption(name, value, (spell, got) => `${spell(name)} must be a positive integer, got ${got}`)
  }
  return resolved
}

/**
 * Checks the outbox's liveness rules and returns what breaks them, as data — one snapshot, read-only. The relay,
 * enqueue, redrive and prune keep every rule, so a violation means a defect or damage from outside (a manual
 * edit, a restore, an older release); {@link repairIntegrity} (`outbox doctor --repair`) mends the ones it can.
 *
 * The rules, each per lane (subscription, aggregate): every pending event has a lane row; every lane's head is due
 * at a finite time, or the lane is blocked by a dead letter below it that a redrive can revive; no pending event of
 * an unblocked lane waits at `'infinity'`; a lane blocked as exhausted holds a dead letter, one parked by a 409 has
 * a pending head last answered 409; no lease outlasts `maxLeaseMs`; every pending event's subscription exists. And
 * per aggregate: its counter is at or above its sequences.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { checkIntegrity } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { ok, violations, findings } = await checkIntegrity(db, { maxLeaseMs: 60_000 })
 * if (!ok) console.error('outbox lanes need repair', violations)
 * for (const finding of findings) console.warn(finding.detail)
 * ```
 */
export async function checkIntegrity(
  db: Kysely<any>,
  options: CheckIntegrityOptions = {},
): Promise<IntegrityReport> {
  const schema = resolveSchema(options.schema)
  const maxLeaseMs = positive(options.maxLeaseMs, DEFAULT_LEASE_MS, 'maxLeaseMs')
  const overdueMs = positive(options.overdueAfterMs, DEFAULT_OVERDUE_AFTER_MS, 'overdueAfterMs')
  const limit = positive(options.limit, 100, 'limit')
  const disabledMs = disabledRetentionOption(options.disabledRetention)
  const [violations, overdue, paused, backfills] = await Promise.all([
    findViolations({ db, schema }, { maxLeaseMs, limit }),
    findOverdueHeads({ db, schema }, { overdueMs, limit }),
    selectPausedBacklogs({ db, schema }),
    selectRunningBackfills({ db, schema }),
  ])
  return {
    ok: violations.length === 0,
    violations: violations.map((row) => ({
      kind: row.kind as IntegrityViolationKind,
      subscriptionId: row.subscription_id,
      subscriptionName: row.subscription_name,
      aggregateType: row.aggregate_type,
      aggregateId: row.aggregate_id,
      detail: row.detail,
    })),
    findings: overdue.map((row) => {
      const overdueSeconds = Math.round(Number(row.overdue_seconds))
      return {
        kind: 'overdue_head' as const,
        subscriptionId: row.subscription_id,
        subscriptionName: row.subscription_name,
        aggregateType: row.aggregate_type,
        aggregateId: row.aggregate_id,
        eventId: row.event_id,
        sequence: Number(row.sequence),
        overdueSeconds,
        detail: `head (sequence ${row.sequence}) due for ${overdueSeconds} s and no relay holds it: are relays running?`,
      }
    }),
    warnings: [
      ...paused.flatMap((row) => {
        const warning = pausedSubscriptionWarning(
          {
            id: row.id,
            name: row.name,
            state: 'disabled',
            pending: Number(row.pending),
            disabledAt: row.disabled_at,
            oldestPendingAt: row.oldest_pending_at,
            dropped: Number(row.dropped_deliveries),
            lastDroppedAt: row.last_dropped_at,
          },
          disabledMs,
        )
        return warning === undefined ? [] : [warning]
      }),
      ...backfills.map((row) =>
        backfillWarning({
          id: row.id,
          name: row.name,
          aggregatesDone: Number(row.aggregates_done),
          aggregatesTotal: row.aggregates_total === null ? null : Number(row.aggregates_total),
          events: Number(row.events),
          waitingSince: row.waiting_since,
        }),
      ),
    ],
  }
}

/** What {@link repairIntegrity} did to one lane (or, with `subscriptionId` null, to an aggregate's counter). */
export type LaneRepairResult = LaneRepair & {
  /** As in {@link IntegrityViolation.subscriptionId}. */
  readonly subscriptionId: string | null
  /** As in {@link IntegrityViolation.subscriptionName}. */
  readonly subscriptionName: string | null
  readonly aggregateType: string
  readonly aggregateId: string
  /** The violations that sent the repair there. */
  readonly kinds: readonly IntegrityViolationKind[]
}

/** What {@link repairIntegrity} did, and the check after it. */
export interface RepairReport {
  readonly lanes: readonly LaneRepairResult[]
  /** {@link checkIntegrity} once the repairs are done. */
  readonly after: IntegrityReport
}

/** Options of {@link repairIntegrity}: those of {@link checkIntegrity}, and who repairs. */
export interface RepairIntegrityOptions extends CheckIntegrityOptions {
  /** Who repairs, as the audit log records it. @defaultValue 'api' */
  readonly actor?: string
}

/** The rules a repair mends; `lease_too_long` is only reported (shortening a lease under its owner is not safe). */
const REPAIRABLE: ReadonlySet<IntegrityViolationKind> = new Set<IntegrityViolationKind>([
  'pending_without_lane',
  'head_not_due',
  'row_at_infinity',
  'blocked_without_dead_letter',
  'conflict_without_pending',
  'stale_conflict_marker',
  'counter_behind',
  'orphaned_subscription',
])

/**
 * Mends what {@link checkIntegrity} finds, lane by lane, each in a transaction of its own that takes the lane like a
 * claim: never under a live lease (that lane is skipped, and says so), with the aggregate's counter locked so no
 * enqueue of it is open meanwhile. Each lane is mended from its own subscription's rows alone. A lane blocked by a
 * dead letter that is gone resumes as if that event had been skipped; rows stuck at `'infinity'` in a lane not
 * blocked become due; stale 409 parks are cleared; a missing lane row or a counter behind its sequences is
 * restored; the rows and lane of a subscription that no longer exists are deleted. Returns what it did and a fresh
 * check. A run that repaired or skipped anything is recorded as ONE `integrity.repair` row of the audit log, under
 * `actor`.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { repairIntegrity } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { lanes, after } = await repairIntegrity(db)
 * for (const lane of lanes) console.log(lane.subscriptionId, lane.aggregateType, lane.aggregateId, lane.outcome)
 * if (!after.ok) console.error('still broken', after.violations)
 * ```
 */
export async function repairIntegrity(
  db: Kysely<any>,
  options: RepairIntegrityOptions = {},
): Promise<RepairReport> {
  const schema = resolveSchema(options.schema)
  const actor = actorOption(options.actor)
  const before = await checkIntegrity(db, options)
  const byLane = new Map<
    string,
    {
      subscriptionId: string | null
      subscriptionName: string | null
      aggregateType: string
      aggregateId: string
      kinds: IntegrityViolationKind[]
    }
  >()
  for (const violation of before.violations) {
    if (!REPAIRABLE.has(violation.kind)) continue
    const key = JSON.stringify([violation.subscriptionId, violation.aggregateType, violation.aggregateId])
    const lane = byLane.get(key) ?? {
      subscriptionId: violation.subscriptionId,
      subscriptionName: violation.subscriptionName,
      aggregateType: violation.aggregateType,
      aggregateId: violation.aggregateId,
      kinds: [],
    }
    lane.kinds.push(violation.kind)
    byLane.set(key, lane)
  }
  const lanes: LaneRepairResult[] = []
  for (const lane of byLane.values()) {
    const repair = await db.transaction().execute((trx) => repairLane({ db: trx, schema }, lane))
    lanes.push({ ...repair, ...lane })
  }
  const acted = lanes.filter((lane) => lane.outcome === 'skipped' || lane.actions.length > 0)
  if (acted.length > 0) {
    // One row per run, in a small insert of its own after the lanes' transactions: each lane commits on its own (a
    // run may stop half-way and every lane mended so far stays mended), and one row per run keeps a repair of a
    // badly damaged outbox from flooding the log. A crash between the last lane and this insert loses the row,
    // never a repair; the next run's check shows what is left.
    await recordAudit(
      { db, schema },
      {
        actor,
        action: 'integrity.repair',
        target: {
          lanes: acted.map((lane) => ({
            subscriptionId: lane.subscriptionId,
            aggregateType: lane.aggregateType,
            aggregateId: lane.aggregateId,
            kinds: lane.kinds,
          })),
        },
        result: {
          repaired: acted.filter((lane) => lane.outcome === 'repaired').length,
          skipped: acted.filter((lane) => lane.outcome === 'skipped').length,
          actions: acted.map((lane) =>
            lane.outcome === 'repaired'
              ? { outcome: 'repaired', actions: lane.actions }
              : { outcome: 'skipped', reason: lane.reason },
          ),
        },
      },
    )
  }
  return { lanes, after: await checkIntegrity(db, options) }
}
