import { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
import { type Duration, parseDuration } from './duration.js'
import { invalidOption } from './errors.js'

/**
 * A disabled retention of 7 days, to opt in with (`prune(db, { retention, disabledRetention:
 * DEFAULT_OUTBOX_DISABLED_RETENTION_MS })`): a customer's endpoint down over a long weekend, and an operator acting
 * on the `stats`/`doctor` warning within a working week, fit in it. It is not prune's default: without a
 * `disabledRetention`, prune keeps a disabled subscription's deliveries.
 */
export const DEFAULT_OUTBOX_DISABLED_RETENTION_MS = 7 * 86_400_000

/**
 * Resolves a `disabledRetention` option (prune's, and the one `stats` and `checkIntegrity` describe in their
 * warnings): ms, or false when none is given. Nothing is dropped unless the operator asked: a subscription is
 * disabled by a single `410 Gone` from its customer's endpoint as well as by an operator, so dropping what it holds
 * is never a default.
 */
export function disabledRetentionOption(value: Duration | false | undefined): number | false {
  if (value === undefined || value === false) return false
  if (typeof value !== 'number' && typeof value !== 'string') {
    throw invalidOption(
      'disabledRetention',
      value,
      (spell, got) =>
        `${spell('disabledRetention')} must be a duration (ms or a string like '7d') or false to keep a disabled subscription's deliveries, got ${got}`,
    )
  }
  return parseDuration(value, 'disabledRetention')
}

/** What the warning needs to know of a subscription. */
export interface PausedSubscriptionFacts {
  readonly id: string
  readonly name: string | null
  readonly state: string | null
  readonly pending: number
  readonly disabledAt: Date | null
  /** The enqueue time of its oldest pending delivery; null with none. */
  readonly oldestPendingAt: Date | null
  /** Deliveries the disabled retention has dropped from it, cumulative. */
  readonly dropped: number
  readonly lastDroppedAt: Date | null
}

/** A retention in words: `7d`, `36h`, `90m`, `45s` or `500ms`, the largest whole unit. */
function describeRetention(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`
  }
  return `${ms}ms`
}

/**
 * The warning `stats` and `checkIntegrity` give about a disabled stored subscription that still holds pending
 * events, or has lost some to the disabled retention: no relay claims them, they hold back pruning until the
 * subscription is enabled (and catches up) or deleted — and a `prune` run with a disabled retention drops those held
 * longer than it, so the warning says from when (`retentionMs` false, the default: never).
 *
 * The implicit subscription is never warned about: a relay given an `endpoint` serves it whatever its state, so its
 * pending events are not stuck (and its lag shows when no such relay runs); the disabled retention never drops them.
 */
export function pausedSubscriptionWarning(
  subscription: PausedSubscriptionFacts,
  retentionMs: number | false,
): string | undefined {
  const { id, name, state, pending, dropped } = subscription
  if (state !== 'disabled' || id === IMPLICIT_SUBSCRIPTION_ID) return undefined
  if (pending === 0 && dropped === 0) return undefined
  const who = `disabled subscription ${name ?? id}`
  const lost =
    dropped === 0
      ? ''
      : `; it has lost ${dropped} pending deliver${dropped === 1 ? 'y' : 'ies'} to the disabled retention (last at ${subscription.lastDroppedAt?.toISOString() ?? 'unknown'})`
  if (pending === 0) return `${who} holds nothing now${lost}: enable or delete it`
  const held = `${who} holds ${pending} pending event${pending === 1 ? '' : 's'}; they pin pruning: enable or delete it`
  // Kept is the default: nothing to add. With a retention, the warning says when the first of them goes.
  if (retentionMs === false) return `${held}${lost}`
  // Every way to disable a subscription stamps disabled_at; a row without one (edited by hand) is never dropped.
  if (subscription.disabledAt === null) return `${held}${lost}`
  const from = Math.max(subscription.oldestPendingAt?.getTime() ?? 0, subscription.disabledAt.getTime())
  const dropAt = new Date(from + retentionMs).toISOString()
  return `${held}; prune drops those held longer than ${describeRetention(retentionMs)} (the disabled retention), the first from ${dropAt}${lost}`
}
