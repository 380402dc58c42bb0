import { AUTO_DISABLE_REASONS, isAutoDisableReason } from './auto-disable.js'
import { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
import type { OutboxStats, SubscriptionStats } from './stats.js'
import type { SubscriptionLabeler } from './subscription-labeler.js'

/** One series of a gauge: its labels and its value. */
export type GaugeSeries = readonly [Readonly<Record<string, string>>, number]

/** How the relay's metrics register one gauge whose series are computed from each scrape's stats snapshot. */
export interface SubscriptionGaugeSink {
  /** Registers a gauge (its name without the prefix) whose series `collect` computes from a snapshot. */
  gauge(
    name: string,
    help: string,
    labelNames: string[],
    collect: (figures: OutboxStats) => readonly GaugeSeries[],
  ): void
  /** Label values of the per-subscription gauges: subscription ids, under the metrics' label cap. */
  readonly labels: SubscriptionLabeler
}

/** How subscriptions that share one label (`other`, or `all` under `'none'`) are folded into one value. */
type Fold = 'sum' | 'max'

/**
 * The per-subscription gauges: each takes one figure of a subscription's stats and how shares of one label fold.
 * Labelled by id, never by name: a name may be a tenant's, and metrics travel further than the console.
 */
const PER_SUBSCRIPTION: readonly [string, string, Fold, (share: SubscriptionStats) => number][] = [
  [
    'subscription_pending_events',
    'Events not yet delivered, by subscription id (other: the subscriptions past the label cap, summed).',
    'sum',
    (share) => share.pending,
  ],
  [
    'subscription_oldest_due_seconds',
    'Age since enqueue of the oldest pending event a relay could send now (not in a backoff or a park), by subscription id; 0 when none, and for a disabled subscription (other: the largest).',
    'max',
    (share) => share.oldestDueSeconds,
  ],
  [
    'subscription_in_flight_lanes',
    'Lanes held under a live lease, by subscription id (other: summed).',
    'sum',
    (share) => share.inFlight,
  ],
  [
    'subscription_breaker_open',
    'Whether the subscription endpoint breaker is open or probing (1) or closed (0), by subscription id (other: how many are open).',
    'sum',
    (share) => (share.breaker === 'closed' ? 0 : 1),
  ],
]

/** What a disabled subscription's `disabledReason` is reported as: the auto-disable reason, or `operator`. */
function reasonLabel(reason: string | null): string {
  // An operator's reason is free text (up to 500 characters): never a label value.
  return isAutoDisableReason(reason) ? reason : 'operator'
}

/**
 * Registers the gauges read from each scrape's stats snapshot beside the outbox-wide ones: one series per
 * subscription id (capped: the rest fold into `other`) of pending events, oldest due age, lanes in flight and breaker
 * state — so a per-tenant SLO needs no SQL — and the disabled stored subscriptions by reason (`gone`: disabled by a
 * relay on a `410`; `operator`), which PostgreSQL keeps, so a restarted relay still reports them.
 */
export function registerSubscriptionGauges(sink: SubscriptionGaugeSink): void {
  for (const [name, help, fold, figure] of PER_SUBSCRIPTION) {
    sink.gauge(name, help, ['subscription'], (figures) => {
      const values = new Map<string, number>()
      for (const share of figures.subscriptions) {
        const label = sink.labels.label(share.id)
        const value = figure(share)
        const before = values.get(label)
        values.set(
          label,
          before === undefined ? value : fold === 'sum' ? before + value : Math.max(before, value),
        )
      }
      return [...values].map(([subscription, value]) => [{ subscription }, value] as const)
    })
  }
  sink.gauge(
    'disabled_subscriptions',
    'Stored subscriptions disabled now, by reason: gone (a relay disabled it when its endpoint answered 410 Gone) or operator.',
    ['reason'],
    (figures) => {
      // Both series always exist (0 when none), so an alert on them has a value to compare.
      const counts = new Map<string, number>(
        [...AUTO_DISABLE_REASONS, 'operator'].map((reason) => [reason, 0]),
      )
      for (const share of figures.subscriptions) {
        if (share.state !== 'disabled' || share.id === IMPLICIT_SUBSCRIPTION_ID) continue
        const reason = reasonLabel(share.disabledReason)
        counts.set(reason, (counts.get(reason) ?? 0) + 1)
      }
      return [...counts].map(([reason, value]) => [{ reason }, value] as const)
    },
  )
}
