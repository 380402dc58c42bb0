import type { Kysely } from 'kysely'
import { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
import type { Duration } from './duration.js'
import { disabledRetentionOption, pausedSubscriptionWarning } from './paused-subscription.js'
import { resolveSchema } from './schema-name.js'
import { readStats, type SubscriptionStatsRow } from './sql/read-stats.js'

/** The health figures `stats` gives, for the whole outbox or for one subscription. */
export interface StatsFigures {
  /** Age in seconds of the oldest undelivered event (0 when nothing is pending): the number to alert on. */
  readonly lagSeconds: number
  /** Events not yet delivered (including lanes waiting in backoff); one per subscription an event goes to. */
  readonly pending: number
  /** Lanes a relay holds under a live lease right now. */
  readonly inFlight: number
  /** Lane heads that failed 3 or more times and are still being retried. */
  readonly struggling: number
  /**
   * Lane heads whose relay died while sending them, as many times as their attempts allow (migration 0019): each is
   * now sent alone — nothing else in flight in its relay — so the next crash proves whether it is the cause. A
   * poison event; its lane still moves (delivered, or dead-lettered after its attempts).
   */
  readonly suspect: number
  /** Dead-lettered events kept for inspection and redrive. */
  readonly dead: number
  /** Lanes parked by a 409 from the consumer or by an exhausted event under `onExhausted: 'block'`. */
  readonly blocked: number
}

/** One subscription's share of {@link OutboxStats}: its own lanes' figures. */
export interface SubscriptionStats extends StatsFigures {
  /** The subscription's id: the nil uuid for the implicit subscription (the relay's `endpoint`). */
  readonly id: string
  /** Its name (`default` for the implicit one); null for a stored subscription created without one. */
  readonly name: string | null
  /** A disabled subscription is paused: it keeps receiving events, which no relay claims until it is enabled. */
  readonly state: 'enabled' | 'disabled'
  /** The tenant whose events alone it receives; null when it receives every tenant's. */
  readonly tenant: string | null
  /**
   * Its endpoint's circuit breaker: `open` (no lane claimed until a probe), `probing` (one relay is sending the
   * probe) or `closed`. Always `closed` for the implicit subscription, which has none.
   */
  readonly breaker: 'closed' | 'open' | 'probing'
  /**
   * Age in seconds (since its enqueue) of its oldest pending delivery that a relay could send now — not one waiting
   * in a retry backoff or behind a park — or 0 with none: the number a per-subscription delivery SLO alerts on. Always
   * 0 for a disabled stored subscription, whose events are not due until it is enabled (its `pending` and its
   * `disabledReason` say what it holds and why).
   */
  readonly oldestDueSeconds: number
  /**
   * Why it is disabled: `gone` when a relay disabled it because its endpoint answered `410 Gone` (see
   * `AUTO_DISABLE_REASONS`), else the operator's reason (`disabled` when none was given); null while enabled.
   */
  readonly disabledReason: string | null
  /** Since when it is disabled; null while enabled. */
  readonly disabledAt: Date | null
  /**
   * Pending deliveries `prune` dropped from it while it was disabled past the disabled retention, cumulative over
   * its life: events its endpoint never received.
   */
  readonly dropped: number
}

/** Options of {@link stats}. */
export interface StatsOptions {
  /** @defaultValue 'public' */
  readonly schema?: string
  /**
   * The disabled retention your `prune` runs with, if it runs with one, so a warning about a disabled subscription
   * can say when its held deliveries start to be dropped. @defaultValue false (prune keeps them, as by default)
   */
  readonly disabledRetention?: Duration | false
}

/** A snapshot of the outbox's health, all plain numbers: totals over every subscription, then each one's share. */
export interface OutboxStats extends StatsFigures {
  /**
   * One entry per subscription, the implicit one first, then by name. The implicit subscription is listed only
   * while it is enabled or still holds pending, dead or blocked work, so an outbox that serves stored subscriptions
   * alone does not show an idle `default`. The totals are the sums of the entries (lag: their maximum), except for
   * rows a deleted subscription left behind, which only the totals count (`checkIntegrity` reports them).
   */
  readonly subscriptions: readonly SubscriptionStats[]
  /**
   * Things an operator should act on, for a person: a disabled stored subscription holding pending events (no relay
   * claims them, they hold back pruning, and a prune run with a disabled retention drops those held past it: the
   * warning says from when) or that lost some to the disabled retention.
   */
  readonly warnings: readonly string[]
}

/** A head with this many failed attempts counts as struggling. */
export const STRUGGLING_ATTEMPTS = 3

function figures(row: SubscriptionStatsRow): StatsFigures {
  return {
    lagSeconds: row.lag_seconds === null ? 0 : Math.max(0, Number(row.lag_seconds)),
    pending: Number(row.pending),
    inFlight: Number(row.in_flight),
    struggling: Number(row.struggling),
    suspect: Number(row.suspect),
    dead: Number(row.dead),
    blocked: Number(row.blocked),
  }
}

/**
 * Reads the outbox's health in one consistent snapshot (a single query): the totals, and the same figures per
 * subscription.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { stats } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { lagSeconds, dead, blocked, subscriptions, warnings } = await stats(db)
 * if (lagSeconds > 300 || blocked > 0) console.warn('outbox needs attention')
 * for (const sub of subscriptions) if (sub.dead > 0) console.warn(`${sub.name}: ${sub.dead} dead letters`)
 * for (const warning of warnings) console.warn(warning)
 * ```
 */
export async function stats(db: Kysely<any>, options: StatsOptions = {}): Promise<OutboxStats> {
  const disabledMs = disabledRetentionOption(options.disabledRetention)
  const rows = await readStats(
    { db, schema: resolveSchema(options.schema) },
    { strugglingAttempts: STRUGGLING_ATTEMPTS },
  )
  const total = { lagSeconds: 0, pending: 0, inFlight: 0, struggling: 0, suspect: 0, dead: 0, blocked: 0 }
  const subscriptions: SubscriptionStats[] = []
  const warnings: string[] = []
  for (const row of rows) {
    const share = figures(row)
    total.lagSeconds = Math.max(total.lagSeconds, share.lagSeconds)
    total.pending += share.pending
    total.inFlight += share.inFlight
    total.struggling += share.struggling
    total.suspect += share.suspect
    total.dead += share.dead
    total.blocked += share.blocked
    if (!row.known) continue
    const state = row.state === 'disabled' ? 'disabled' : 'enabled'
    const idle = share.pending === 0 && share.dead === 0 && share.blocked === 0
    if (row.subscription_id === IMPLICIT_SUBSCRIPTION_ID && state === 'disabled' && idle) continue
    const breaker = row.breaker ?? 'closed'
    // The implicit subscription is served by any relay given an `endpoint`, whatever its stored state.
    const paused = state === 'disabled' && row.subscription_id !== IMPLICIT_SUBSCRIPTION_ID
    const entry = {
      id: row.subscription_id,
      name: row.name,
      state,
      tenant: row.tenant,
      breaker,
      oldestDueSeconds:
        paused || row.oldest_due_seconds === null ? 0 : Math.max(0, Number(row.oldest_due_seconds)),
      disabledReason: state === 'disabled' ? row.disabled_reason : null,
      disabledAt: state === 'disabled' ? row.disabled_at : null,
      ...share,
      dropped: Number(row.dropped_deliveries),
    } as const
    subscriptions.push(entry)
    const warning = pausedSubscriptionWarning(
      {
        ...entry,
        disabledAt: row.disabled_at,
        oldestPendingAt: row.oldest_pending_at,
        lastDroppedAt: row.last_dropped_at,
      },
      disabledMs,
    )
    if (warning) warnings.push(warning)
    if (breaker !== 'closed' && state === 'enabled') {
      warnings.push(
        `subscription ${entry.name ?? entry.id}: its endpoint's breaker is ${breaker} (failing); its ${share.pending} pending events wait for a probe to succeed`,
      )
    }
  }
  return { ...total, subscriptions, warnings }
}
