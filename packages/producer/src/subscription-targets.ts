import { parseSigningSecrets } from '@outbox/protocol'
import { type DeliveryTarget, implicitTarget } from './delivery-target.js'
import type { RelayEvents } from './events.js'
import { LEASE_MARGIN_MS, type ResolvedRelayOptions } from './options.js'
import type { Clock } from './runtime.js'
import { openSecret } from './secret-envelope.js'
import { type SubscriptionTargetRow, selectSubscriptionTargets } from './sql/select-subscription-targets.js'

/**
 * How long a relay trusts what it read of the stored subscriptions. A subscription created, changed, disabled or
 * given a new secret is picked up by every relay within this long; an unknown subscription id met in between
 * forces a read at once.
 */
export const SUBSCRIPTION_REFRESH_MS = 2000

/**
 * The subscriptions a relay serves, each as a {@link DeliveryTarget}. With an `endpoint`, that is the implicit
 * subscription alone, fixed for the relay's life. Without one, it is the enabled stored subscriptions (or those the
 * relay was given) whose backfill is not running, read from the database at most every
 * {@link SUBSCRIPTION_REFRESH_MS}; those whose backfill runs are listed apart ({@link SubscriptionTargets.backfilling})
 * for the relay to copy for.
 *
 * A stored subscription the relay cannot serve safely is left out and reported once (`subscription:skipped` and a
 * warning) until it is fixed: a `requestTimeoutMs` that does not fit the relay's lease (a request must never
 * outlive the lease that allowed it), a stored secret that is not a valid signing secret, or one encrypted under a
 * key the relay was not given (its `secretKeys`): the reason names the key id, and the relay goes on serving the
 * others.
 */
export class SubscriptionTargets {
  readonly #options: ResolvedRelayOptions
  readonly #events: RelayEvents
  readonly #clock: Clock
  #targets: ReadonlyMap<string, DeliveryTarget>
  /** Subscriptions whose endpoint breaker is open. */
  #open = new Set<string>()
  /** The subscriptions whose endpoint's last answer, or record in PostgreSQL, says it fails or times out. */
  #failing = new Set<string>()
  /** Requests per subscription unanswered for longer than the lane worker's `slowRequestMs`. */
  readonly #unanswered = new Map<string, number>()
  /** Subscriptions whose backfill runs, with their names: copied for by this relay, not served. */
  #backfilling: ReadonlyMap<string, string> = new Map()
  #readAt = Number.NEGATIVE_INFINITY
  /** Skipped subscriptions already reported, with the reason reported: a new reason is reported again. */
  readonly #reported = new Map<string, string>()
  /** Per subscription, the outage failures being recorded now, and a promise settled once none is. */
  readonly #recording = new Map<string, { count: number; settled: Promise<void>; settle: () => void }>()

  constructor(options: ResolvedRelayOptions, events: RelayEvents, clock: Clock) {
    this.#options = options
    this.#events = events
    this.#clock = clock
    const { endpoint } = options
    this.#targets = new Map(
      endpoint === undefined
        ? []
        : [[implicitTarget(options, endpoint).subscriptionId, implicitTarget(options, endpoint)]],
    )
  }

  /** True when the relay serves stored subscriptions (read from the database), false for an `endpoint` relay. */
  get stored(): boolean {
    return this.#options.endpoint === undefined
  }

  /** Reads the stored subscriptions again when what was read is older than the refresh interval (or `force`). */
  async refresh(force = false): Promise<void> {
    if (!this.stored) return
    if (!force && this.#clock.now() - this.#readAt < SUBSCRIPTION_REFRESH_MS) return
    const rows = await selectSubscriptionTargets(this.#options, { ids: this.#options.subscriptions })
    const targets = new Map<string, DeliveryTarget>()
    const backfilling = new Map<string, string>()
    for (const row of rows) {
      // The gate of `startAt: 'earliest'`: while its backfill runs, the copy inserts old events BELOW the
      // sequences fanned out to it since it was created, so none of its lanes may be claimed. What this relay read
      // may be up to SUBSCRIPTION_REFRESH_MS old, and that is safe: the state only ever moves absent → running →
      // done, and a subscription is created with its state in one transaction. A stale read shows an earlier state
      // — not there yet (not served), or running (not served) — so it can only delay delivery, never start it early;
      // and once read as done it stays done.
      if (row.backfilling) {
        backfilling.set(row.id, row.name ?? row.id)
        continue
      }
      if (!row.enabled) continue
      const target = this.#toTarget(row)
      if (target) targets.set(row.id, target)
    }
    for (const id of this.#reported.keys()) {
      if (!rows.some((row) => row.id === id)) this.#reported.delete(id)
    }
    this.#targets = targets
    this.#backfilling = backfilling
    this.#open = new Set(rows.filter((row) => row.breakerOpen).map((row) => row.id))
    this.#failing = new Set(rows.filter((row) => row.failing).map((row) => row.id))
    this.#readAt = this.#clock.now()
  }

  /** The ids of the subscriptions served now (never one whose backfill runs). */
  served(): string[] {
    return [...this.#targets.keys()]
  }

  /** The subscriptions whose backfill runs, as last read: id → name (its id when it has none). */
  backfilling(): ReadonlyMap<string, string> {
    return this.#backfilling
  }

  /** Records a backfill this relay finished; the next refresh serves the subscription (if it is enabled). */
  backfillDone(subscriptionId: string): void {
    if (!this.#backfilling.has(subscriptionId)) return
    const backfilling = new Map(this.#backfilling)
    backfilling.delete(subscriptionId)
    this.#backfilling = backfilling
  }

  /** The target of a served subscription; undefined once it is no longer served (disabled, deleted, skipped). */
  get(subscriptionId: string): DeliveryTarget | undefined {
    return this.#targets.get(subscriptionId)
  }

  /** Whether a subscription's endpoint breaker is open, as last read or as this relay changed it since. */
  breakerOpen(subscriptionId: string): boolean {
    return this.#open.has(subscriptionId)
  }

  /** Records a breaker this relay opened or closed, before the next refresh reads it. */
  setBreakerOpen(subscriptionId: string, open: boolean): void {
    if (open) this.#open.add(subscriptionId)
    else this.#open.delete(subscriptionId)
  }

  /**
   * Whether a subscription's endpoint is known to fail or time out: its last answer to this relay was an outage
   * failure, or, since the last read, its failure streak in PostgreSQL (every relay's attempts) is above zero; or a
   * request to it has gone unanswered for a while ({@link SubscriptionTargets.unanswered}). The slot rule
   * (`slot-rule.ts`) bounds what such subscriptions hold together.
   */
  failing(subscriptionId: string): boolean {
    return this.#failing.has(subscriptionId) || this.#unanswered.has(subscriptionId)
  }

  /** True when the relay serves several subscriptions: only then do their slots need sharing. */
  get sharing(): boolean {
    return this.#targets.size > 1
  }

  /**
   * Counts a request to this subscription as unanswered for too long (a hanging endpoint looks like this long
   * before its timeout): it is failing until the returned function is called, when the request ends.
   */
  unanswered(subscriptionId: string): () => void {
    this.#unanswered.set(subscriptionId, (this.#unanswered.get(subscriptionId) ?? 0) + 1)
    let done = false
    return () => {
      if (done) return
      done = true
      const left = (this.#unanswered.get(subscriptionId) ?? 1) - 1
      if (left > 0) this.#unanswered.set(subscriptionId, left)
      else this.#unanswered.delete(subscriptionId)
    }
  }

  /** Records what this relay's last attempt of a subscription showed, before the next refresh reads its record. */
  setFailing(subscriptionId: string, failing: boolean): void {
    if (failing) this.#failing.add(subscriptionId)
    else this.#failing.delete(subscriptionId)
  }

  /**
   * Marks an outage failure of this subscription (a 5xx, timeout or network error) as being recorded: until the
   * returned function is called, {@link SubscriptionTargets.recorded} makes this relay's other lanes of it wait
   * before their next request. The failure's statement answers whether the breaker is open (opened by it, or by
   * another relay): a request started meanwhile, by a lane that could not know yet, is one the breaker was meant
   * to spare. A few milliseconds per failure, and only while the endpoint fails.
   */
  recording(subscriptionId: string): () => void {
    let entry = this.#recording.get(subscriptionId)
    if (!entry) {
      let settle!: () => void
      const settled = new Promise<void>((resolve) => {
        settle = resolve
      })
      entry = { count: 0, settled, settle }
      this.#recording.set(subscriptionId, entry)
    }
    entry.count += 1
    const recorded = entry
    let done = false
    return () => {
      if (done) return
      done = true
      recorded.count -= 1
      if (recorded.count > 0) return
      this.#recording.delete(subscriptionId)
      recorded.settle()
    }
  }

  /** Resolves once no outage failure of this subscription is being recorded; undefined when none is now. */
  recorded(subscriptionId: string): Promise<void> | undefined {
    return this.#recording.get(subscriptionId)?.settled
  }

  /** Stops serving a subscription now, until a refresh finds it enabled again (it was disabled by this relay). */
  forget(subscriptionId: string): void {
    if (!this.#targets.has(subscriptionId)) return
    const targets = new Map(this.#targets)
    targets.delete(subscriptionId)
    this.#targets = targets
  }

  #toTarget(row: SubscriptionTargetRow): DeliveryTarget | undefined {
    const options = this.#options
    const name = row.name ?? row.id
    const requestTimeoutMs = row.requestTimeoutMs ?? options.requestTimeoutMs
    if (requestTimeoutMs + LEASE_MARGIN_MS >= options.leaseMs) {
      this.#skip(
        row,
        `its requestTimeoutMs (${requestTimeoutMs}) + a ${LEASE_MARGIN_MS} ms margin does not fit this relay's leaseMs (${options.leaseMs}): lower the subscription's requestTimeoutMs or raise the relay's leaseMs`,
      )
      return undefined
    }
    let signingKeys: DeliveryTarget['signingKeys']
    try {
      // Decrypted here, on each refresh, and kept only in the target: never logged, never in an event.
      const secrets = row.secrets.map((stored) => openSecret(options.secretKeys, row.id, stored))
      signingKeys = secrets.length === 0 ? [] : parseSigningSecrets(secrets)
    } catch (error) {
      this.#skip(row, error instanceof Error ? error.message : String(error))
      return undefined
    }
    this.#reported.delete(row.id)
    const retrySchedule = Object.freeze([...(row.retrySchedule ?? options.retrySchedule)])
    const url = row.url
    return Object.freeze({
      subscriptionId: row.id,
      name,
      url: () => url,
      signingKeys,
      requestTimeoutMs,
      retrySchedule,
      maxAttempts: retrySchedule.length + 1,
      onExhausted: row.onExhausted ?? options.onExhausted,
      restricted: !options.allowPrivateNetworks,
      limitedInFlight: row.maxInFlight !== null,
      claimLocksRow: row.maxInFlight !== null || row.rateLimited,
    })
  }

  #skip(row: SubscriptionTargetRow, reason: string): void {
    if (this.#reported.get(row.id) === reason) return
    this.#reported.set(row.id, reason)
    const name = row.name ?? row.id
    this.#options.logger.warn({ subscriptionId: row.id, subscription: name, reason }, 'subscription skipped')
    this.#events.emit('subscription:skipped', { subscriptionId: row.id, name, reason })
  }
}
