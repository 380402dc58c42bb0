import type { SigningKey } from '@outbox/protocol'
import type { EndpointEvent, OnExhausted, ResolvedRelayOptions } from './options.js'

/** The id of the implicit subscription: the relay's `endpoint`, which receives every event until disabled. */
export const IMPLICIT_SUBSCRIPTION_ID = '00000000-0000-0000-0000-000000000000'

/**
 * Where and how a relay delivers one subscription's lanes: its URL, secrets, timeout and retry rules. The implicit
 * subscription's come from the relay's options; a stored subscription's from its row, falling back to the relay's
 * options for what it leaves unset.
 */
export interface DeliveryTarget {
  readonly subscriptionId: string
  /** The subscription's name, for logs (`default` for the implicit one). */
  readonly name: string
  readonly url: (event: EndpointEvent) => string
  readonly signingKeys: readonly SigningKey[]
  readonly requestTimeoutMs: number
  readonly retrySchedule: readonly number[]
  readonly maxAttempts: number
  readonly onExhausted: OnExhausted
  /**
   * True when the URL is customer input that may only reach public addresses (a stored subscription, unless the
   * relay has `allowPrivateNetworks`); false for the operator's own `endpoint`, which is never checked.
   */
  readonly restricted: boolean
  /**
   * True when the claim may give it fewer lanes than the relay offers because of a limit counted across relays
   * (a stored subscription's `maxInFlight`): the release of one of its lanes may be what lets the next be claimed.
   */
  readonly limitedInFlight: boolean
  /**
   * True when a claim that offers it room locks its subscription row (its `maxInFlight` or rate is counted there):
   * such a claim may wait for another relay's claim of it.
   */
  readonly claimLocksRow: boolean
}

/** The implicit subscription's target, from a relay given an `endpoint`. */
export function implicitTarget(
  options: ResolvedRelayOptions,
  endpoint: (event: EndpointEvent) => string,
): DeliveryTarget {
  return Object.freeze({
    subscriptionId: IMPLICIT_SUBSCRIPTION_ID,
    name: 'default',
    url: endpoint,
    signingKeys: options.signingKeys,
    requestTimeoutMs: options.requestTimeoutMs,
    retrySchedule: options.retrySchedule,
    maxAttempts: options.maxAttempts,
    onExhausted: options.onExhausted,
    restricted: false,
    limitedInFlight: false,
    claimLocksRow: false,
  })
}
