import { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'

/**
 * The warning `stats` and `checkIntegrity` give about a disabled stored subscription that still holds pending
 * events: no relay claims them, and an event is pruned only once every subscription is done with it, so they hold
 * back pruning until the subscription is enabled (and catches up) or deleted.
 *
 * The implicit subscription is never warned about: a relay given an `endpoint` serves it whatever its state, so its
 * pending events are not stuck (and its lag shows when no such relay runs).
 */
export function pausedSubscriptionWarning(subscription: {
  readonly id: string
  readonly name: string | null
  readonly state: string | null
  readonly pending: number
}): string | undefined {
  const { id, name, state, pending } = subscription
  if (state !== 'disabled' || pending === 0 || id === IMPLICIT_SUBSCRIPTION_ID) return undefined
  return `disabled subscription ${name ?? id} holds ${pending} pending event${pending === 1 ? '' : 's'}; they pin pruning: enable or delete it`
}
