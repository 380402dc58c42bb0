/**
 * The reasons a relay disables a stored subscription by itself, without an operator: `gone`, its endpoint answered
 * `410 Gone`. A subscription disabled for one of these is "auto-disabled": the `subscription:disabled` event, the
 * `outbox_subscription_auto_disables_total` counter, the `outbox_disabled_subscriptions{reason="gone"}` gauge and the
 * console's overview report it. Any other `disabledReason` is an operator's.
 *
 * @example
 * ```ts
 * import { AUTO_DISABLE_REASONS, listSubscriptions } from '@outbox/producer'
 * import type { Kysely } from 'kysely'
 * declare const db: Kysely<any>
 * const auto = (await listSubscriptions(db)).filter(
 *   (sub) => sub.state === 'disabled' && AUTO_DISABLE_REASONS.includes(sub.disabledReason as never),
 * )
 * ```
 */
export const AUTO_DISABLE_REASONS = Object.freeze(['gone'] as const)

/** A reason in {@link AUTO_DISABLE_REASONS}. */
export type AutoDisableReason = (typeof AUTO_DISABLE_REASONS)[number]

/** True when a subscription's `disabledReason` says a relay disabled it by itself (see {@link AUTO_DISABLE_REASONS}). */
export function isAutoDisableReason(reason: string | null): reason is AutoDisableReason {
  return reason !== null && (AUTO_DISABLE_REASONS as readonly string[]).includes(reason)
}
