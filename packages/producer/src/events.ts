import { type DeliveryStatus, EventHub } from '@outbox/protocol'
import type { AutoDisableReason } from './auto-disable.js'
import type { Logger } from './logger.js'

/** The event and lane an occurrence is about. */
export interface EventRef {
  /** The subscription delivered to: the nil uuid for the implicit `endpoint` subscription. */
  readonly subscriptionId: string
  /**
   * The subscription's name (`default` for the implicit one; its id for a stored one without a name), as the relay
   * read it: what logs and metrics label deliveries with.
   */
  readonly subscriptionName: string
  readonly eventId: string
  readonly eventType: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
}

/**
 * Everything a relay reports, by event name (`area:action[:outcome]`). Listeners that throw are caught and logged;
 * there is no bare `'error'` event, so an unheard failure never crashes the process.
 */
export interface RelayEventMap {
  /** A 2xx answer. `deliveryStatus` is the consumer's `status` when it sent one. */
  'delivery:success': EventRef & {
    readonly httpStatus: number
    readonly deliveryStatus: DeliveryStatus | null
    readonly attempts: number
    /** Milliseconds from the event's enqueue to its 2xx. */
    readonly latencyMs: number
  }
  /** An attempt failed; the lane waits `retryInMs` before its head is tried again. */
  'delivery:retry': EventRef & {
    readonly attempts: number
    readonly httpStatus: number | null
    readonly error: string
    readonly retryInMs: number
  }
  /** Attempts ran out: the event is dead-lettered (kept, listed, redrivable). */
  'delivery:dead': EventRef & {
    readonly attempts: number
    readonly httpStatus: number | null
    readonly error: string
    readonly onExhausted: 'skip' | 'block'
  }
  /**
   * One webhook request ended, whatever its outcome: `durationMs` is the request alone (sending to the answer's end),
   * apart from the enqueue-to-2xx latency of `delivery:success`. `outcome` is `aborted` for a request cut by a stop.
   */
  'request:finished': EventRef & {
    readonly durationMs: number
    readonly outcome: 'success' | 'failure' | 'conflict' | 'aborted'
    readonly httpStatus: number | null
  }
  /** The consumer answered `stale_ignored`: it had already applied a later event of the aggregate. */
  'delivery:stale': EventRef & { readonly httpStatus: number }
  /** A lane was parked: by a 409 (`conflict`, retried after `retryInMs`) or by an exhausted event under `'block'`. */
  'lane:blocked': {
    readonly subscriptionId: string
    /** As in {@link EventRef.subscriptionName}. */
    readonly subscriptionName: string
    readonly aggregateType: string
    readonly aggregateId: string
    readonly reason: 'conflict' | 'exhausted'
    readonly eventId: string
    readonly retryInMs: number | null
  }
  /**
   * A lane was claimed after another claim of it expired without an outcome (its relay died or hung). `charged`: a
   * request of its head was under way then, which counts as one failed attempt (retried on the schedule, or
   * dead-lettered, like any failure); otherwise the lane was only claimed, and is handed over free.
   */
  'lane:takeover': {
    readonly subscriptionId: string
    /** As in {@link EventRef.subscriptionName}. */
    readonly subscriptionName: string
    readonly aggregateType: string
    readonly aggregateId: string
    readonly eventId: string
    /** A request of the head was under way in the expired claim: the takeover charges it. */
    readonly charged: boolean
    /**
     * The charge proves nothing (the dead claim had other requests under way): it is counted apart and never
     * dead-letters the head; once such charges reach its attempts, the head is sent alone. False for a free takeover.
     */
    readonly provisional: boolean
    /** The head's failed attempts, a charge proven by a request started alone included. */
    readonly attempts: number
  }
  /**
   * A stored subscription this relay cannot serve safely is left out until it is fixed: `reason` says why and what
   * to change (a `requestTimeoutMs` that does not fit the lease, a stored secret that is not a signing secret).
   * Reported once per reason.
   */
  'subscription:skipped': { readonly subscriptionId: string; readonly name: string; readonly reason: string }
  /**
   * The relay disabled a stored subscription: its endpoint answered `410 Gone` (`reason: 'gone'`). Its events are
   * kept; `enableSubscription` resumes it. Counted in `outbox_subscription_auto_disables_total{reason}`.
   */
  'subscription:disabled': {
    readonly subscriptionId: string
    readonly name: string
    readonly reason: AutoDisableReason
    readonly httpStatus: number
  }
  /**
   * A stored subscription's endpoint breaker opened: after `failureStreak` failed attempts in a row (`reason:
   * 'failures'`), or when its probe failed (`'probe failed'`). None of its lanes is claimed until the cool-down ends
   * and a probe goes.
   */
  'endpoint:opened': {
    readonly subscriptionId: string
    readonly name: string
    readonly reason: 'failures' | 'probe failed'
    readonly failureStreak: number | null
    readonly cooldownMs: number
  }
  /** This relay sends the one probe request of an open breaker (the head of the lane it claimed as the probe). */
  'endpoint:probing': { readonly subscriptionId: string; readonly name: string; readonly eventId: string }
  /** The probe was answered: the breaker is closed, and the subscription's lanes are claimed again. */
  'endpoint:closed': { readonly subscriptionId: string; readonly name: string }
  /**
   * A batch of a subscription's backfill (`startAt: 'earliest'`) committed: `copied` events now, the totals so far.
   * `state: 'done'` once the copy reached the end: relays start delivering to it at their next read of the
   * subscriptions (this relay at once).
   */
  'subscription:backfill': {
    readonly subscriptionId: string
    readonly name: string
    readonly state: 'running' | 'done'
    readonly copied: number
    readonly aggregatesDone: number
    readonly aggregatesTotal: number | null
    readonly events: number
  }
  /**
   * A subscription's backfill waits: a transaction holding an aggregate it reached (an `enqueue` left open) outlasted
   * the batch's lock timeout. Nothing was copied; the relay tries again, and the copy moves on once that transaction
   * ends. Reported once per stall (and logged as a warning).
   */
  'subscription:backfill:waiting': {
    readonly subscriptionId: string
    readonly name: string
    readonly waitingSince: Date
  }
  /** Something went wrong outside one delivery (database unreachable, …); the relay keeps going and retries. */
  'relay:error': {
    readonly error: unknown
    readonly during: 'claim' | 'flush' | 'outcome' | 'listen' | 'backfill'
  }
  'relay:started': Record<string, never>
  /**
   * The relay stopped: `lanes` were in flight when the stop began and were handed back; `aborted` requests outlived
   * the stop's timeout; `unflushed` marks or releases could not be written (database unreachable) — those events
   * are sent again after their lease expires.
   */
  'relay:stopped': { readonly lanes: number; readonly aborted: number; readonly unflushed: number }
}

/** A listener of one relay event. */
export type RelayListener<K extends keyof RelayEventMap> = (payload: RelayEventMap[K]) => void

/**
 * The relay's emitter: {@link EventHub} over {@link RelayEventMap}. Listener failures are contained and logged.
 */
export class RelayEvents extends EventHub<RelayEventMap> {
  constructor(logger: Logger) {
    super(logger, 'relay')
  }
}
