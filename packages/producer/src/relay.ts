import { backoffMs } from './backoff.js'
import { WebhookSender } from './delivery.js'
import { type RelayEventMap, RelayEvents, type RelayListener } from './events.js'
import { deliverLane, type LaneContext, type LaneResult, reportTakeover } from './lane-worker.js'
import { Listener } from './listen.js'
import { MarkBuffer } from './mark-buffer.js'
import { RelayMetrics } from './metrics.js'
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js'
import { type RelayOptionsView, relayOptionsView } from './relay-options-view.js'
import { interruptibleSleep, type RelayRuntime, runtimeOf, withDeadline } from './runtime.js'
import { notifyChannel } from './schema-name.js'
import { checkSchemaNotNewer } from './schema-version.js'
import {
  canStartAny,
  claimBudget,
  claimRooms,
  failingQuota,
  pickNext,
  type SlotPicture,
  shouldYield,
} from './slot-rule.js'
import { type ClaimResult, claimLanes } from './sql/claim-lanes.js'
import type { ClaimedLane } from './sql/claimed-lane.js'
import { markSentAndRelease } from './sql/mark-sent.js'
import { parkBehindBlocks } from './sql/park-behind-blocks.js'
import { SubscriptionBackfill } from './subscription-backfill.js'
import { SubscriptionTargets } from './subscription-targets.js'
import { readClaimedTraceContexts } from './tracing.js'
import { UNSIGNED_WARNING } from './unsigned-warning.js'
import { WriteGate } from './write-gate.js'

/** What one {@link Relay.runOnce} did. */
export interface RunOnceResult {
  /** Events answered 2xx. */
  readonly delivered: number
  /** Failed attempts that will be retried. */
  readonly failed: number
  /** Events dead-lettered. */
  readonly dead: number
}

/** Options of {@link Relay.stop}. */
export interface StopOptions {
  /** How long to wait for in-flight requests before aborting them. @defaultValue 10000 */
  readonly timeoutMs?: number
}

/** How long a stop waits for writes (marks, releases) the database may not accept, beyond its timeout. */
const STOP_GRACE_MS = 2000

/**
 * Rows scanned from the due index per claimed lane wanted; bounds one claim's work on a backlog. Small, since a
 * claim whose window filled up is followed by another at once: with 64, claims of many lanes over a large backlog
 * scanned thousands of rows each and bounded a 128-lane relay on a slow endpoint to 0.75 of its ideal rate (0.92
 * with 8).
 */
const SCAN_ROWS_PER_LANE = 8
/**
 * How often, at most, a claim may offer room to failing subscriptions (with several served). A failing endpoint
 * answering at once finishes its lanes as fast as it gets them, and each claim that carries failing subscriptions
 * costs more than one that does not (rows locked for breakers and probes, failure writes to follow): beside 64
 * endpoints answering 500, every claim carried them until their breakers opened, and the healthy subscription's
 * latency paid for it. Four times a second bounds what they cost whatever their number, and delays a subscription
 * whose endpoint failed once by at most that before its next request can put it back in good standing.
 */
const FAILING_CLAIM_INTERVAL_MS = 250

/** How many of `claimed` belong to a subscription. */
function lanesOf(claimed: readonly ClaimedLane[], subscriptionId: string): number {
  let count = 0
  for (const lane of claimed) if (lane.subscriptionId === subscriptionId) count += 1
  return count
}

/** What one pass of the claim loop asks next: go again at once, or wait for a wake-up or the poll. */
type Pass = 'again' | 'wait'

/** What a relay is doing right now, for tests that step it and wait for it to settle. */
export interface RelayActivity {
  readonly claiming: boolean
  readonly activeLanes: number
  readonly readyLanes: number
  readonly requestsInFlight: number
  /** A mark or release write runs or is about to start. */
  readonly marksBusy: boolean
  readonly heldBytes: number
  /** A backfill batch runs, or the backfill waits to try again. */
  readonly backfilling: boolean
}

/**
 * A relay's inner controls, for tests that drive it step by step (the model-based test): not public API, reached
 * through {@link relayTestHooks}.
 */
export interface RelayTestHooks {
  /** Enters the running state without the claim loop or LISTEN: the test calls {@link RelayTestHooks.step}. */
  startStepping(): Promise<void>
  /** One pass of the real claim loop: start ready lanes, claim (ahead too) when there is room, start what came. */
  step(): Promise<Pass>
  /**
   * One backfill batch of each subscription whose backfill runs, as the relay read them (a stepping relay runs no
   * backfill in the background).
   */
  backfillStep(): Promise<void>
  activity(): RelayActivity
  /** Writes queued marks and releases now. */
  flush(): Promise<void>
  /**
   * Behaves like a killed process: writes nothing more (marks and releases are dropped; the caller also cuts the
   * relay's database connections), requests in flight are cut, ready lanes are forgotten.
   */
  crash(): void
}

const testHooks = new WeakMap<Relay, RelayTestHooks>()

/** The inner controls of a relay (tests only). */
export function relayTestHooks(relay: Relay): RelayTestHooks {
  return testHooks.get(relay)!
}

/**
 * Delivers outbox events as webhooks: claims lanes (one per aggregate) with leases, POSTs each lane's events in
 * sequence order, marks them sent after a 2xx, retries failures on a schedule and dead-letters what never succeeds.
 *
 * Run as many relays as you like, in as many processes: a lane is owned by one live claim at a time, so one
 * aggregate's events are never sent out of order or two at a time, while different aggregates flow in parallel.
 * Delivery is at least once (a crash after a 2xx but before its mark sends it again, with the same event id).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { Relay } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const relay = new Relay({ db, endpoint: 'https://billing.internal/hooks', secret: process.env.OUTBOX_SECRET })
 * relay.on('delivery:dead', (event) => console.error('dead letter', event.eventId, event.error))
 * await relay.start()
 * process.once('SIGTERM', () => void relay.stop({ timeoutMs: 10_000 }))
 * ```
 */
export class Relay {
  readonly #options: ResolvedRelayOptions
  readonly #runtime: RelayRuntime
  readonly #events: RelayEvents
  readonly #sender: WebhookSender
  /** True once the schema was found not newer than this release (see {@link checkSchemaNotNewer}). */
  #schemaChecked = false
  readonly #targets: SubscriptionTargets
  readonly #backfill: SubscriptionBackfill
  /** A backfill finished: read the subscriptions at the next pass rather than at the next refresh. */
  #refreshNow = false
  /** Driven by a test's steps: no backfill in the background. */
  #stepping = false
  /** Lanes held per subscription (claimed ahead or in delivery), for fair claims and slots between subscriptions. */
  readonly #held = new Map<string, number>()
  /** When a claim last offered room to a failing subscription (see {@link FAILING_CLAIM_INTERVAL_MS}). */
  #failingClaimedAt = Number.NEGATIVE_INFINITY
  /** The claim loop's last pass held a failing subscription back until the interval ends: the loop wakes for it. */
  #failingHeldBack = false
  /** Lanes in delivery per subscription. */
  readonly #activeBySubscription = new Map<string, number>()
  /** Clock time each subscription last gained or gave up a lane: the failing ones' claim room rotates by it. */
  readonly #lastHeldAt = new Map<string, number>()
  /** Clock time of the last claim, so subscriptions holding no lane are looked for at most once a poll interval. */
  #lastClaimAt = Number.NEGATIVE_INFINITY
  /** When this relay last swept blocked lanes for rows that arrived after the block ({@link parkBehindBlocks}). */
  #lastParkSweepAt = Number.NEGATIVE_INFINITY
  readonly #marks: MarkBuffer
  readonly #context: LaneContext
  readonly #active = new Set<Promise<LaneResult>>()
  /** Every lane in delivery (through the claim loop or {@link Relay.runOnce}), by claim token: what an isolation waits for. */
  readonly #delivering = new Map<string, Promise<LaneResult>>()
  /** Give-back writes under way ({@link Relay.#giveBack}): a stop waits for them before it resolves. */
  readonly #givingBack = new Set<Promise<void>>()
  /** The claim token of the lane being sent alone (see {@link Relay.#isolate}); nothing else starts meanwhile. */
  #isolating: string | undefined
  /** Lanes claimed ahead, waiting for a delivery slot (see {@link Relay.#run}). */
  #ready: ClaimedLane[] = []
  /** Payload bytes read and not yet delivered, across every lane held: bounded by `maxBufferedBytes`. */
  #heldBytes = 0
  /** Claims in flight: the claim loop's, and at most one express claim beside it (see {@link Relay.#startExpress}). */
  #claims = 0
  /** The claim loop's claim in flight: the subscriptions it offered room to, and the byte budget it was given. */
  #loopClaim: { readonly offered: ReadonlySet<string>; readonly bytes: number } | undefined
  /**
   * Subscriptions whose last claim gave them all the room it offered: they may have more due lanes (a backlog).
   * The others had none left when claimed: their next lane is an event committed since.
   */
  readonly #filled = new Set<string>()
  /** The express claim running beside the claim loop's, and the subscriptions it offers room to. */
  #express: Promise<void> | undefined
  #expressFor: ReadonlySet<string> = new Set()
  #state: 'idle' | 'running' | 'stopping' = 'idle'
  #abort = new AbortController()
  #loop: Promise<void> | undefined
  #stopping: Promise<void> | undefined
  #wake: (() => void) | undefined
  #wakeRequested = false
  /** NOTIFYs received so far; the mark writer compares it across a write (see the constructor). */
  #notifications = 0
  /**
   * True when the claim loop last stopped for lack of room (slots, ready queue or byte budget full, or its claim
   * came back full): a lane that finishes should wake it. Otherwise the database had no more due lanes, and a
   * finishing lane changes nothing a NOTIFY or a release would not announce — waking then only costs an empty claim.
   */
  #roomBound = false
  /**
   * True when the last claim offered room to a subscription the database limits across relays (`maxInFlight`, an
   * open breaker's single probe): it may have given fewer lanes than it could have had this relay's own leases been
   * gone. So a lane release written (not a lane finishing: its lease counts until the release lands) wakes the loop.
   */
  #limitBound = false
  #closed = false
  /** Set by the test hooks' crash: a killed process writes nothing more. */
  #crashed = false
  #listener: Listener | undefined
  #metrics: Promise<RelayMetrics> | undefined
  /** Wall-clock time the claim loop last completed a pass (see {@link Relay.lastPassAt}). */
  #lastPassAt: Date | undefined

  /** Checks every option now and throws `OutboxError` (`ERR_OUTBOX_INVALID_OPTION`, naming it in `option`) with what to change. */
  constructor(options: RelayOptions) {
    this.#options = resolveRelayOptions(options)
    this.#runtime = runtimeOf(options)
    this.#events = new RelayEvents(this.#options.logger)
    this.#sender = new WebhookSender({
      keys: this.#options.signingKeys,
      timeoutMs: this.#options.requestTimeoutMs,
      clock: this.#runtime.clock,
      onUnsigned: () => this.#options.logger.warn({ signed: false }, UNSIGNED_WARNING),
      onRefused: (refusal) =>
        this.#options.logger.warn({ host: refusal.host, address: refusal.address }, refusal.message),
    })
    this.#targets = new SubscriptionTargets(this.#options, this.#events, this.#runtime.clock)
    this.#backfill = new SubscriptionBackfill({
      options: this.#options,
      events: this.#events,
      targets: this.#targets,
      clock: this.#runtime.clock,
      running: () => this.#state === 'running',
      onDone: () => {
        this.#refreshNow = true
        this.#requestWake()
      },
      reportError: (error, during) => this.#reportError(error, during),
    })
    this.#marks = new MarkBuffer({
      write: async (marks, releases) => {
        const notifiedBefore = this.#notifications
        const { released, releasedWithWork } = await markSentAndRelease(this.#options, { marks, releases })
        // A released lane with pending rows is claimable now, and the claim loop may be waiting for a poll. The
        // count misses rows committed while the statement ran; their NOTIFY may have found the lane still leased,
        // so a NOTIFY received during the write wakes the loop too, and so does any release while a subscription's
        // limit held the last claim back (see #limitBound). Otherwise releasing lanes with nothing left wakes no one:
        // at a steady trickle that saved an empty claim per event.
        if (
          releasedWithWork > 0 ||
          (released > 0 && (this.#limitBound || this.#notifications !== notifiedBefore))
        )
          this.#requestWake()
      },
      onError: (error) => this.#reportError(error, 'flush'),
      clock: this.#runtime.clock,
    })
    this.#context = {
      options: this.#options,
      runtime: this.#runtime,
      sender: this.#sender,
      targets: this.#targets,
      marks: this.#marks,
      events: this.#events,
      stopping: () => this.#state === 'stopping',
      abort: this.#abort.signal,
      bytesLeft: () => this.#options.maxBufferedBytes - this.#heldBytes,
      yieldSlot: (subscriptionId) => this.#yieldSlot(subscriptionId),
      isolate: (lane) => this.#isolate(lane),
      heldBack: (lane) => this.#isolating !== undefined && this.#isolating !== lane.claimToken,
      holdBytes: (bytes) => {
        this.#heldBytes += bytes
      },
      freeBytes: (bytes) => {
        this.#heldBytes -= bytes
      },
      reportError: (error, during) => this.#reportError(error, during),
      failureWrites: new WriteGate(failingQuota(this.#options.concurrency)),
    }
    testHooks.set(this, {
      startStepping: async () => {
        if (this.#state !== 'idle') throw new Error('the relay is already running')
        await this.#setUpMetrics()
        this.#stepping = true
        this.#state = 'running'
      },
      step: () => this.#pass(),
      backfillStep: async () => {
        await this.#backfill.step()
      },
      activity: () => ({
        claiming: this.#claims > 0,
        activeLanes: this.#active.size,
        readyLanes: this.#ready.length,
        requestsInFlight: this.#sender.inFlight,
        marksBusy: this.#marks.busy,
        heldBytes: this.#heldBytes,
        backfilling: this.#backfill.busy,
      }),
      flush: () => this.#marks.flush(),
      crash: () => {
        this.#crashed = true
        this.#state = 'stopping'
        this.#closed = true
        this.#marks.abandon()
        for (const lane of this.#ready) this.#count(this.#held, lane.subscriptionId, -1)
        this.#ready = []
        this.#sender.abortAll()
      },
    })
  }

  /** The resolved, frozen options (secrets are not exposed). */
  get options(): RelayOptionsView {
    return relayOptionsView(this.#options)
  }

  /** True between `start()` and the end of `stop()`. */
  get running(): boolean {
    return this.#state !== 'idle'
  }

  /** Subscribes to a relay event; returns the unsubscribe function. */
  on<K extends keyof RelayEventMap>(name: K, listener: RelayListener<K>): () => void {
    return this.#events.on(name, listener)
  }

  /** Subscribes for one occurrence. */
  once<K extends keyof RelayEventMap>(name: K, listener: RelayListener<K>): () => void {
    return this.#events.once(name, listener)
  }

  /** Removes a listener. */
  off<K extends keyof RelayEventMap>(name: K, listener: RelayListener<K>): void {
    this.#events.off(name, listener)
  }

  /**
   * One claim-and-deliver cycle: runs one backfill batch of each subscription whose backfill runs (`startAt:
   * 'earliest'`), claims up to `concurrency` due lanes, delivers them, writes the marks, and returns what happened.
   * For tests, scripts and cron-style use; a long-running service calls {@link start}.
   */
  async runOnce(): Promise<RunOnceResult> {
    await this.#setUpMetrics()
    // A cycle run by hand sees the subscriptions as they are now, not as a read up to two seconds old left them.
    await this.#targets.refresh(true)
    if (this.#targets.backfilling().size > 0) {
      await this.#backfill.step()
      await this.#targets.refresh(true)
    }
    const { concurrency } = this.#options
    // Never held back by the failing claims' interval: one cycle claims once, and a script looping until nothing is
    // claimed must not take the interval for an empty outbox.
    const rooms = claimRooms(this.#picture(), concurrency)
    const { lanes } = await this.#claim(rooms, concurrency, this.#context.bytesLeft())
    await this.#parkBehindBlocks(true)
    const results = await Promise.all(lanes.map((lane) => this.#deliver(lane)))
    await this.#marks.flush()
    return results.reduce<RunOnceResult>(
      (sum, one) => ({
        delivered: sum.delivered + one.delivered,
        failed: sum.failed + one.failed,
        dead: sum.dead + one.dead,
      }),
      { delivered: 0, failed: 0, dead: 0 },
    )
  }

  /**
   * Starts claiming and delivering in the background. Calling it again while running does nothing.
   *
   * It does not wait for the database: started before PostgreSQL is up (a host reboot, a rollout), it resolves, and
   * the claim loop tries again with backoff (the poll interval doubled, at most 30 s), emitting `relay:error` (`during:
   * 'claim'`) for each failed try, until the database answers — then it delivers. Meanwhile {@link lastPassAt} stays
   * undefined, which a readiness check reads as "not ready". The LISTEN connection, when set, retries on its own
   * backoff and the relay polls meanwhile. It rejects only when the relay was stopped or metrics cannot be set up.
   */
  async start(): Promise<void> {
    if (this.#closed) throw new Error('this relay was stopped; create a new Relay to start again')
    if (this.#state !== 'idle') return
    this.#state = 'running'
    const { listen, logger, pollIntervalMs, concurrency, schema } = this.#options
    try {
      await this.#setUpMetrics()
    } catch (error) {
      this.#state = 'idle'
      throw error
    }
    if (listen === false) {
      logger.warn(
        { pollIntervalMs },
        `LISTEN wake-ups are off: polling every ${pollIntervalMs} ms (pass listen: { connectionString } for instant delivery)`,
      )
    } else {
      this.#listener = new Listener(
        listen,
        notifyChannel(schema),
        () => {
          this.#notifications += 1
          this.#requestWake()
          this.#startExpress()
        },
        logger,
        (error) => this.#events.emit('relay:error', { error, during: 'listen' }),
      )
      await this.#listener.start()
    }
    this.#loop = this.#run()
    this.#events.emit('relay:started', {})
    logger.info({ concurrency, listen: listen !== false }, 'relay started')
  }

  /**
   * When the claim loop last completed a pass (claimed, or found nothing due), or undefined before the first one
   * and while stopped. A readiness probe compares it with the clock: a loop that stopped completing passes (a hung
   * connection, a claim that never returns) is a relay that delivers nothing, however healthy its process looks.
   */
  get lastPassAt(): Date | undefined {
    return this.#state === 'running' ? this.#lastPassAt : undefined
  }

  /** True while the LISTEN connection is up (false when wake-ups are off or the connection is being restored). */
  get listening(): boolean {
    return this.#listener?.connected ?? false
  }

  #setUpMetrics(): Promise<RelayMetrics> | undefined {
    const { metrics, db, schema } = this.#options
    if (!metrics || this.#metrics) return this.#metrics
    this.#metrics = RelayMetrics.create(metrics, db, schema).then((created) => {
      created.attach(this.#events)
      return created
    })
    return this.#metrics
  }

  #requestWake(): void {
    if (this.#wake) this.#wake()
    else this.#wakeRequested = true
  }

  /**
   * Stops gracefully: stops claiming, lets in-flight requests finish (aborting them after `timeoutMs`), writes
   * pending marks and hands every lane back at once, so another relay picks them up without waiting for a lease.
   * Safe to call twice; resolves when done.
   */
  async stop(options: StopOptions = {}): Promise<void> {
    if (this.#stopping) return await this.#stopping
    if (this.#state === 'idle') return
    this.#stopping = this.#shutdown(options.timeoutMs ?? 10_000)
    await this.#stopping
  }

  /** `await using relay = new Relay(…)` stops it at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop()
  }

  async #shutdown(timeoutMs: number): Promise<void> {
    const { clock } = this.#runtime
    this.#state = 'stopping'
    this.#wake?.()
    const lanes = this.#active.size
    let aborted = 0
    const abortTimer = clock.setTimeout(() => {
      aborted = this.#active.size
      this.#abort.abort()
    }, timeoutMs)
    // Each lane finishes its current request (or is aborted at timeoutMs) and hands itself back through the mark
    // buffer. With the database unreachable those writes cannot land: wait a grace period, then give up on them
    // (their leases expire and another relay takes over — a delay, never a loss).
    // The loop too: it may be mid-claim. A claim that outlasts even the grace (waiting on a lock, a slow server)
    // hands its lanes back itself when it returns (see #pass).
    // The backfill starts no batch once stopping; its batch in flight is one statement, which commits or rolls
    // back whole.
    const settled = Promise.allSettled([...this.#active, this.#backfill.settled(), this.#express])
    await withDeadline(clock, timeoutMs + STOP_GRACE_MS, Promise.all([settled, this.#loop]))
    clock.clearTimeout(abortTimer)
    // Lanes claimed ahead but never started go back untouched, in the same flush as everything else.
    for (const lane of this.#ready.splice(0)) {
      this.#heldBytes -= lane.heldBytes
      this.#count(this.#held, lane.subscriptionId, -1)
      this.#marks.release({ claimToken: lane.claimToken, delivered: false })
    }
    await withDeadline(clock, STOP_GRACE_MS, this.#marks.flush())
    // Lanes a claim returned while the relay stopped are handed back by writes of their own: landed before stop()
    // resolves, or the application may close the pool under them.
    await withDeadline(clock, STOP_GRACE_MS, Promise.all(this.#givingBack))
    const unflushed = this.#marks.abandon()
    await this.#listener?.stop()
    await this.#sender.close()
    this.#state = 'idle'
    this.#closed = true
    this.#stopping = undefined
    this.#events.emit('relay:stopped', { lanes, aborted, unflushed })
    this.#options.logger.info({ lanes, aborted, unflushed }, 'relay stopped')
  }

  /**
   * The claim loop. It claims AHEAD: besides the `concurrency` lanes in delivery it keeps up to `concurrency` more
   * claimed and read, so a lane that finishes hands its slot to the next one at once instead of after a claim's
   * two round trips. Ready lanes hold a lease while they wait; the lease covers it (each request is still checked
   * against the lane's deadline) and `stop()` hands them back unopened.
   */
  async #run(): Promise<void> {
    const { pollIntervalMs } = this.#options
    let errors = 0
    while (this.#state === 'running') {
      let next: Pass
      try {
        next = await this.#pass()
        this.#lastPassAt = new Date()
        errors = 0
      } catch (error) {
        errors += 1
        this.#reportError(error, 'claim')
        // At most eight doublings of the poll interval, and never more than 30 s.
        await this.#idle(
          backoffMs(errors, { baseMs: pollIntervalMs, maxMs: Math.min(30_000, pollIntervalMs * 2 ** 8) }),
        )
        continue
      }
      if (this.#state !== 'running') break
      if (next === 'again') continue
      // A failing subscription held back by the claims' interval is looked for again when it ends, not a whole poll
      // interval later: nothing else may wake the loop for it (its lanes all finished within the interval).
      await this.#idle(
        this.#failingHeldBack ? Math.min(pollIntervalMs, this.#failingWaitMs()) : pollIntervalMs,
      )
    }
  }

  /**
   * One pass of the claim loop. It claims when the ready queue is half empty (batches of lanes, not one claim per
   * finished lane) or when a slot is free with nothing ready, and only what the byte budget leaves room for. A full
   * claim, or one whose scan window filled up, may leave more due lanes behind it: then go again at once.
   * Otherwise wait for a lane to finish (when room was what stopped us), a NOTIFY, a release with work left, or the
   * poll interval.
   *
   * With several subscriptions, each gets a room of its own (see {@link Relay.#rooms}), and a subscription holding
   * no lane is looked for even when the others fill the relay — at most once a poll interval — so a slow or
   * backlogged subscription can never keep another one's lanes from being claimed.
   */
  async #pass(): Promise<Pass> {
    const { concurrency, pollIntervalMs } = this.#options
    const refillAt = Math.ceil(concurrency / 2)
    const force = this.#refreshNow
    this.#refreshNow = false
    await this.#targets.refresh(force)
    // Copies run beside the claim loop, never in it: a claim never waits for a batch, nor a batch for a claim.
    if (!this.#stepping) this.#backfill.poke()
    await this.#parkBehindBlocks()
    this.#startReady()
    // One subscription: every lane held counts against twice the slots. Several: as the slot rule counts them
    // (`claimBudget`), so lanes held by failing subscriptions beyond their share, or the first lane of each
    // subscription, never stop the claims another subscription's lanes need.
    const picture = this.#targets.sharing ? this.#picture() : undefined
    const wanted = picture
      ? claimBudget(picture, 2 * concurrency)
      : 2 * concurrency - this.#active.size - this.#ready.length
    const slotFree = picture ? canStartAny(picture) : this.#active.size < concurrency
    const bytesLeft = this.#context.bytesLeft()
    // A subscription an express claim is claiming for now gets no room here: it is in one claim at a time.
    const { rooms: loopRooms, failingHeldBack } = this.#rooms(2 * concurrency)
    this.#failingHeldBack = failingHeldBack
    const rooms = loopRooms.map((room) => (this.#expressFor.has(room.id) ? { id: room.id, room: 0 } : room))
    const idleRoom = rooms.reduce((sum, room) => sum + (this.#held.has(room.id) ? 0 : room.room), 0)
    const lookForIdle = idleRoom > 0 && this.#runtime.clock.now() - this.#lastClaimAt >= pollIntervalMs
    const lanes = Math.max(wanted, lookForIdle ? idleRoom : 0)
    let claimed: readonly ClaimedLane[] = []
    let windowFull = false
    let budgetFull = bytesLeft <= 0
    if (lanes > 0 && !budgetFull && (wanted >= refillAt || slotFree || lookForIdle)) {
      const offered = rooms.filter((room) => room.room > 0)
      // A claim that may take a while leaves the share of the byte budget that the other subscriptions' rooms make
      // to an express claim beside it (see #startExpress).
      const slow = offered.some((room) => this.#slowToClaim(room.id))
      const maxBytes = slow ? bytesLeft - this.#expressShare(offered, bytesLeft) : bytesLeft
      this.#lastClaimAt = this.#runtime.clock.now()
      this.#loopClaim = { offered: new Set(offered.map((room) => room.id)), bytes: maxBytes }
      let result: ClaimResult
      try {
        result = await this.#claim(rooms, lanes, maxBytes)
      } finally {
        this.#loopClaim = undefined
      }
      this.#noteFilled(offered, result.lanes)
      if (this.#state !== 'running') {
        // Stopped (or crashed) while the claim ran: its lanes were never started.
        this.#giveBack(result.lanes)
        return 'wait'
      }
      claimed = result.lanes
      windowFull = result.windowFull
      budgetFull = result.budgetFull
      this.#ready.push(...result.lanes)
      this.#startReady()
    }
    const more = wanted > 0 && !budgetFull && (claimed.length === lanes || windowFull)
    this.#roomBound =
      more ||
      wanted <= 0 ||
      budgetFull ||
      (wanted < refillAt && !slotFree) ||
      this.#roomFilled(rooms, claimed)
    this.#limitBound = rooms.some(
      (room) => this.#targets.breakerOpen(room.id) || this.#targets.get(room.id)?.limitedInFlight === true,
    )
    return more ? 'again' : 'wait'
  }

  /**
   * Whether a subscription got all the room this relay offered it (none, when its share was full): then it may
   * have more due lanes, and one of its lanes finishing should wake the loop. One that got less than its room had no
   * more due lanes: a finishing lane changes nothing a NOTIFY or a release would not announce, and waking for it
   * would only cost an empty claim per delivery (which a relay serving one endpoint at a steady rate paid).
   */
  #roomFilled(rooms: readonly { id: string; room: number }[], claimed: readonly ClaimedLane[]): boolean {
    return rooms.some((room) => lanesOf(claimed, room.id) >= room.room)
  }

  /** Notes, for each subscription a claim offered room to, whether it got all of it ({@link Relay.#filled}). */
  #noteFilled(offered: readonly { id: string; room: number }[], claimed: readonly ClaimedLane[]): void {
    for (const room of offered) {
      if (lanesOf(claimed, room.id) >= room.room) this.#filled.add(room.id)
      else this.#filled.delete(room.id)
    }
  }

  /**
   * Whether a claim that offers this subscription room may take a while: it has a backlog (its last claim got all
   * the room offered, and reading many lanes' rows takes time), or the claim locks its row (`maxInFlight`, a rate,
   * an open breaker's probe) and may wait there for another relay's claim of it.
   */
  #slowToClaim(subscriptionId: string): boolean {
    return (
      this.#filled.has(subscriptionId) ||
      this.#targets.breakerOpen(subscriptionId) ||
      this.#targets.get(subscriptionId)?.claimLocksRow === true
    )
  }

  /**
   * The part of `bytesLeft` a claim that may take a while leaves to an express claim: the share of the rooms it
   * offers that goes to the subscriptions an express claim would serve.
   */
  #expressShare(offered: readonly { id: string; room: number }[], bytesLeft: number): number {
    let quick = 0
    let total = 0
    for (const room of offered) {
      total += room.room
      if (!this.#slowToClaim(room.id)) quick += room.room
    }
    return total === 0 ? 0 : Math.floor((bytesLeft * quick) / total)
  }

  /**
   * On a NOTIFY while the claim loop's claim may take a while ({@link Relay.#slowToClaim}: it includes a backlog,
   * or waits for a limited subscription's row that another relay's claim holds): claims at once, beside it, for the
   * subscriptions that are quick to claim. An event committed while the loop's claim runs is not in its snapshot:
   * without this, a quiet subscription's next event waited for that claim to return, and then for a claim of its
   * own. The express claim never waits for a subscription row: it offers room to none that is slow to claim.
   *
   * One express claim at a time; it claims again while NOTIFYs keep arriving and the loop's claim is still in flight.
   * A subscription it claims for gets no room from the loop's next claim until it returns. The loop's claim in
   * flight may also give such a subscription lanes, so it may briefly hold up to twice its share of the relay's
   * room: a local queue only, since every limit across relays (`maxInFlight`, a rate, an open breaker) is the
   * claim function's, under the subscription row's lock. The byte budget is not shared: the express claim spends
   * what the loop's claim left it ({@link Relay.#expressShare}), and lanes that would overrun it go back unopened.
   */
  #startExpress(): void {
    const loopClaim = this.#loopClaim
    if (this.#express || !loopClaim || this.#state !== 'running') return
    if (![...loopClaim.offered].some((id) => this.#slowToClaim(id))) return
    this.#express = this.#runExpress().finally(() => {
      this.#express = undefined
    })
  }

  async #runExpress(): Promise<void> {
    const { concurrency, maxBufferedBytes } = this.#options
    let seen: number | undefined
    while (this.#state === 'running' && this.#loopClaim && seen !== this.#notifications) {
      seen = this.#notifications
      const offered = this.#rooms(2 * concurrency).rooms.filter(
        (room) => room.room > 0 && !this.#slowToClaim(room.id),
      )
      const lanes = offered.reduce((sum, room) => sum + room.room, 0)
      const maxBytes = maxBufferedBytes - this.#heldBytes - this.#loopClaim.bytes
      if (lanes === 0 || maxBytes <= 0) return
      this.#expressFor = new Set(offered.map((room) => room.id))
      let result: ClaimResult
      try {
        result = await this.#claim(offered, lanes, maxBytes)
      } catch (error) {
        this.#reportError(error, 'claim')
        return
      } finally {
        this.#expressFor = new Set()
      }
      this.#noteFilled(offered, result.lanes)
      const held = result.lanes.reduce((sum, lane) => sum + lane.heldBytes, 0)
      // Stopped meanwhile, or one event larger than what was left: never started, handed back.
      if (this.#state !== 'running' || held > maxBytes) {
        this.#giveBack(result.lanes)
        return
      }
      this.#ready.push(...result.lanes)
      this.#startReady()
      // A subscription that got all its room may have more: the loop looks once its claim returns.
      if (offered.some((room) => this.#filled.has(room.id))) this.#requestWake()
    }
  }

  /**
   * Once a lease interval (or `now`, in a cycle run by hand), parks the rows an enqueue committed behind a lane's blocker after the block. Every relay
   * sweeps (it is one indexed statement over blocked lanes), so a relay that crashed right after blocking a lane
   * leaves nothing behind.
   */
  async #parkBehindBlocks(now = false): Promise<void> {
    const at = this.#runtime.clock.now()
    // After the first claim's schema check: a schema a newer release migrated is not written to.
    if (!this.#schemaChecked || (!now && at - this.#lastParkSweepAt < this.#options.leaseMs)) return
    const served = this.#targets.served()
    if (served.length === 0) return
    this.#lastParkSweepAt = at
    const parked = await parkBehindBlocks(this.#options, { subscriptions: served })
    if (parked > 0)
      this.#options.logger.info({ parked }, 'parked events that arrived behind blocked lanes after the block')
  }

  /**
   * How many lanes each served subscription may be given by the next claim, out of `capacity` held lanes (claimed
   * ahead or in delivery): the slot rule's {@link claimRooms}, with none for failing subscriptions within
   * {@link FAILING_CLAIM_INTERVAL_MS} of the last claim that offered them some (one subscription alone is never held
   * back: there is no one to protect). `failingHeldBack`: a failing subscription had room and was given none.
   */
  #rooms(capacity: number): { rooms: { id: string; room: number }[]; failingHeldBack: boolean } {
    const rooms = claimRooms(this.#picture(), capacity)
    if (!this.#targets.sharing || this.#failingWaitMs() === 0) return { rooms, failingHeldBack: false }
    let failingHeldBack = false
    const held = rooms.map((room) => {
      if (!this.#targets.failing(room.id)) return room
      if (room.room > 0) failingHeldBack = true
      return { id: room.id, room: 0 }
    })
    return { rooms: held, failingHeldBack }
  }

  /** How long until a claim may offer failing subscriptions room again ({@link FAILING_CLAIM_INTERVAL_MS}). */
  #failingWaitMs(): number {
    return Math.max(0, FAILING_CLAIM_INTERVAL_MS - (this.#runtime.clock.now() - this.#failingClaimedAt))
  }

  /**
   * What the slot rule (`slot-rule.ts`) sees now: every served subscription's lanes in delivery and held, whether it
   * is busy (holds lanes) and whether its endpoint is failing. The failing ones come least recently served first, so
   * the claim room their quota allows rotates between them.
   *
   * Busy means holding lanes now. A subscription with a steady trickle of events holds none between them; it once
   * counted as busy for a second after, so that a slow or backlogged subscription could not take its share meanwhile.
   * The rule's first clause now keeps its next event from waiting (its first request always starts), and counting
   * every trickle as a sharer starved a busy subscription: sixteen subscriptions with 3 events a second each held a
   * 200-events-a-second one to a sixteenth of the slots.
   */
  #picture(): SlotPicture {
    const subscriptions = this.#targets.served().map((id) => {
      const lastHeldAt = this.#lastHeldAt.get(id) ?? Number.NEGATIVE_INFINITY
      return {
        id,
        active: this.#activeBySubscription.get(id) ?? 0,
        held: this.#held.get(id) ?? 0,
        busy: this.#held.has(id),
        failing: this.#targets.failing(id),
        lastHeldAt,
      }
    })
    const failing = subscriptions.filter((sub) => sub.failing)
    if (failing.length === 0) return { concurrency: this.#options.concurrency, subscriptions }
    failing.sort((a, b) => (a.lastHeldAt === b.lastHeldAt ? 0 : a.lastHeldAt < b.lastHeldAt ? -1 : 1))
    return {
      concurrency: this.#options.concurrency,
      subscriptions: [...subscriptions.filter((sub) => !sub.failing), ...failing],
    }
  }

  /**
   * Whether a lane of this subscription should give its slot back before its next request: the slot rule's
   * {@link shouldYield} (its subscription took slots while the others were idle, or turned failing, and a lane of
   * another one waits to start).
   */
  #yieldSlot(subscriptionId: string): boolean {
    if (this.#ready.length === 0 || !this.#targets.sharing) return false
    return shouldYield(
      this.#picture(),
      subscriptionId,
      this.#ready.map((lane) => lane.subscriptionId),
    )
  }

  /** Adds `delta` to a per-subscription count, dropping it at zero (so `has` means "holds some"). */
  #count(counts: Map<string, number>, subscriptionId: string, delta: number): void {
    if (counts === this.#held) this.#lastHeldAt.set(subscriptionId, this.#runtime.clock.now())
    const next = (counts.get(subscriptionId) ?? 0) + delta
    if (next > 0) counts.set(subscriptionId, next)
    else counts.delete(subscriptionId)
  }

  /**
   * Hands back the lanes of a claim that returned after the relay stopped (or a stop began): they were never
   * started. One write of its own, not the mark buffer's — a stop may have given up on that buffer already (a claim
   * waiting on a lock or a slow server outlasts the stop's grace) — so no lane a stopped relay claimed stays
   * leased until its lease runs out. A stop under way waits for the write (within its grace): a claim that returns
   * while the relay stops hands its lanes back here, and a `stop()` that resolved before that write landed let the
   * application close the pool under it — the lane then stayed leased for a whole lease, its head charged a
   * takeover (seen under load: the lane-listing test, 2–3 stops in 200).
   */
  #giveBack(lanes: readonly ClaimedLane[]): void {
    for (const lane of lanes) {
      this.#heldBytes -= lane.heldBytes
      this.#count(this.#held, lane.subscriptionId, -1)
    }
    if (this.#crashed || lanes.length === 0) return
    const releases = lanes.map((lane) => ({ claimToken: lane.claimToken, delivered: false }))
    const write = markSentAndRelease(this.#options, { marks: [], releases }).then(
      () => {},
      (error: unknown) => this.#reportError(error, 'flush'),
    )
    this.#givingBack.add(write)
    void write.finally(() => this.#givingBack.delete(write))
  }

  /**
   * Moves ready lanes into the delivery slots the slot rule (`slot-rule.ts`) allows; a lane that finishes starts
   * the next one itself. With several subscriptions ready, a slow, backlogged or failing subscription's lanes wait in
   * the ready queue rather than take the slots another subscription's next lanes need, and a subscription in good
   * standing with nothing in flight always starts one.
   */
  #startReady(): void {
    // While a suspect is sent alone (see #isolate), nothing else starts.
    while (this.#state === 'running' && this.#isolating === undefined) {
      const lane = this.#nextReady()
      if (!lane) return
      const work = this.#deliver(lane)
      this.#active.add(work)
      // deliverLane never rejects: every failure ends as an outcome or a relay:error.
      void work.then((result) => {
        this.#active.delete(work)
        this.#startReady()
        // A failure's outcome released the lane itself, and may have made something due now (a retry after 0 ms,
        // the event behind a dead letter under 'skip'): look at once rather than at the next poll. Failures are rare.
        if (this.#roomBound || result.failed > 0 || result.dead > 0) this.#requestWake()
      })
    }
  }

  #nextReady(): ClaimedLane | undefined {
    if (this.#ready.length === 0) return undefined
    // One subscription (the implicit endpoint's relay, the hot path): every slot is its own.
    if (!this.#targets.sharing) {
      return this.#active.size < this.#options.concurrency ? this.#ready.shift() : undefined
    }
    const index = pickNext(
      this.#picture(),
      this.#ready.map((lane) => lane.subscriptionId),
    )
    return index < 0 ? undefined : this.#ready.splice(index, 1)[0]
  }

  /** Waits `ms`, or less when a wake-up arrives (NOTIFY, a lane finishing, stop). A wake-up that came while the
   * loop was busy is not lost: the next wait returns at once. */
  #idle(ms: number): Promise<void> {
    if (this.#wakeRequested) {
      this.#wakeRequested = false
      return Promise.resolve()
    }
    return interruptibleSleep(this.#runtime.clock, ms, (wake) => {
      this.#wake = wake
    })
  }

  async #claim(
    subscriptions: readonly { id: string; room: number }[],
    lanes: number,
    maxBytes: number,
  ): Promise<ClaimResult> {
    const { leaseMs, batchSize } = this.#options
    this.#claims += 1
    if (subscriptions.some((subscription) => subscription.room > 0 && this.#targets.failing(subscription.id)))
      this.#failingClaimedAt = this.#runtime.clock.now()
    let result: ClaimResult
    try {
      // Once per relay, before its first claim: a schema a newer release migrated is refused, every claim, until
      // this relay is upgraded (reported as a claim error, as a schema that is too old is).
      if (!this.#schemaChecked) {
        await checkSchemaNotNewer(this.#options)
        this.#schemaChecked = true
      }
      // The resolved options are the SQL context (db, schema): nothing is built per claim.
      result = await claimLanes(this.#options, {
        subscriptions: subscriptions.filter((subscription) => subscription.room > 0),
        lanes,
        leaseMs,
        scanRows: Math.max(lanes * SCAN_ROWS_PER_LANE, 256),
        batchSize,
        maxBytes,
        clock: this.#runtime.clock,
      })
      // Tracing only: the claimed events' trace contexts, in one statement (see sql/select-trace-contexts.ts).
      await readClaimedTraceContexts(this.#options, result.lanes)
    } finally {
      this.#claims -= 1
    }
    for (const lane of result.lanes) {
      this.#heldBytes += lane.heldBytes
      this.#count(this.#held, lane.subscriptionId, 1)
      reportTakeover(this.#context, lane)
    }
    return result
  }

  #deliver(lane: ClaimedLane): Promise<LaneResult> {
    const work = this.#deliverLane(lane)
    this.#delivering.set(lane.claimToken, work)
    return work
  }

  async #deliverLane(lane: ClaimedLane): Promise<LaneResult> {
    this.#count(this.#activeBySubscription, lane.subscriptionId, 1)
    try {
      return await deliverLane(this.#context, lane)
    } finally {
      this.#delivering.delete(lane.claimToken)
      this.#heldBytes -= lane.heldBytes
      this.#count(this.#activeBySubscription, lane.subscriptionId, -1)
      this.#count(this.#held, lane.subscriptionId, -1)
    }
  }

  /**
   * Isolates one lane's next request: nothing else starts (see {@link Relay.#startReady}), every other lane in
   * delivery hands itself back (its request under way is cut: see below), and every
   * mark and release they queued is written. Then, if this relay dies, that lane's request was the only one it had
   * started, and the takeover that follows proves it (see `deliverAlone` in the lane worker). One lane at a time:
   * a second suspect lane is handed back unstarted and claimed again later. Resolves to the function that ends the
   * isolation, or undefined when one is under way already or the relay is stopping.
   */
  async #isolate(lane: ClaimedLane): Promise<(() => void) | undefined> {
    // Not while stopping; a cycle run by hand (runOnce, state idle) isolates as the claim loop does.
    if (this.#isolating !== undefined || this.#halted()) return undefined
    this.#isolating = lane.claimToken
    const end = () => {
      if (this.#isolating !== lane.claimToken) return
      this.#isolating = undefined
      this.#startReady()
      this.#requestWake()
    }
    try {
      // Lanes that finish meanwhile start nothing; whatever else a lane does before it hands back (settling a
      // failure, a flush) is awaited by its own delivery.
      const others = [...this.#delivering].filter(([token]) => token !== lane.claimToken)
      // Their requests under way are cut rather than awaited: so an isolation costs the other lanes at most the
      // suspect's own request (one requestTimeoutMs) and a few writes, not a second timeout while a slow request
      // ends. A cut request is no attempt (its lane is handed back as it is); one that reached its endpoint is sent
      // again later, a duplicate its consumer absorbs. The suspect's request has not started: nothing else is cut.
      this.#sender.abortAll()
      await Promise.all(others.map(([, work]) => work))
      await this.#marks.flush()
    } catch (error) {
      end()
      throw error
    }
    if (this.#halted()) {
      end()
      return undefined
    }
    return end
  }

  /** Stopping, or crashed by the test hooks: nothing new may start. */
  #halted(): boolean {
    return this.#state === 'stopping' || this.#crashed
  }

  #reportError(error: unknown, during: RelayEventMap['relay:error']['during']): void {
    this.#options.logger.error({ err: error, during }, `relay ${during} failed; retrying`)
    this.#events.emit('relay:error', { error, during })
  }
}
