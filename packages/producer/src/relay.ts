import { WebhookSender } from './delivery.js'
import { type RelayEventMap, RelayEvents, type RelayListener } from './events.js'
import {
  type ClaimedLane,
  deliverLane,
  type LaneContext,
  type LaneResult,
  settleFailure,
} from './lane-worker.js'
import { Listener } from './listen.js'
import { MarkBuffer } from './mark-buffer.js'
import { RelayMetrics } from './metrics.js'
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js'
import { notifyChannel } from './schema-name.js'
import { withCurrentSchema } from './schema-outdated.js'
import { claimLanes } from './sql/claim-lanes.js'
import { countTakeoverAttempts } from './sql/count-takeover-attempts.js'
import { markSentAndRelease } from './sql/mark-sent.js'

/** What one {@link Relay.runOnce} did. */
export interface RunOnceResult {
  /** Events answered 2xx. */
  readonly delivered: number
  /** Failed attempts that will be retried (409 parks included). */
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

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
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
 * const relay = new Relay({ db, endpoint: 'https://billing.internal/hooks', signingSecret: process.env.OUTBOX_SIGNING_SECRET })
 * relay.on('delivery:dead', (event) => console.error('dead letter', event.eventId, event.error))
 * await relay.start()
 * process.once('SIGTERM', () => void relay.stop({ timeoutMs: 10_000 }))
 * ```
 */
export class Relay {
  readonly #options: ResolvedRelayOptions
  readonly #events: RelayEvents
  readonly #sender: WebhookSender
  readonly #marks: MarkBuffer
  readonly #active = new Set<Promise<LaneResult>>()
  /** Lanes claimed ahead, waiting for a delivery slot (see {@link Relay.#run}). */
  #ready: ClaimedLane[] = []
  #state: 'idle' | 'running' | 'stopping' = 'idle'
  #abort = new AbortController()
  #loop: Promise<void> | undefined
  #stopping: Promise<void> | undefined
  #wake: (() => void) | undefined
  #wakeRequested = false
  /** NOTIFYs received so far; the mark writer compares it across a write (see the constructor). */
  #notifications = 0
  /**
   * True when the claim loop last stopped for lack of room (slots and ready queue full, or its claim came back
   * full): a lane that finishes should wake it. Otherwise the database had no more due lanes, and a finishing lane
   * changes nothing a NOTIFY or a release would not announce — waking then only costs an empty claim.
   */
  #roomBound = false
  #closed = false
  #listener: Listener | undefined
  #metrics: Promise<RelayMetrics> | undefined

  /** Checks every option now and throws `OutboxError` (`ERR_OUTBOX_INVALID_OPTIONS`) with what to change. */
  constructor(options: RelayOptions) {
    this.#options = resolveRelayOptions(options)
    this.#events = new RelayEvents(this.#options.logger)
    this.#sender = new WebhookSender({
      keys: this.#options.signingKeys,
      timeoutMs: this.#options.requestTimeoutMs,
      connections: this.#options.concurrency,
    })
    this.#marks = new MarkBuffer(
      async (marks, releases) => {
        const notifiedBefore = this.#notifications
        const { released, releasedWithWork } = await markSentAndRelease(
          this.#options.db,
          this.#options.schema,
          marks,
          releases,
        )
        // A released lane with pending rows is claimable now, and the claim loop may be waiting for a poll. The
        // count misses rows committed while the statement ran; their NOTIFY may have found the lane still leased,
        // so a NOTIFY received during the write wakes the loop too. Releasing lanes with nothing left wakes no one:
        // at a steady trickle that saved an empty claim per event.
        if (releasedWithWork > 0 || (released > 0 && this.#notifications !== notifiedBefore))
          this.#requestWake()
      },
      (error) => this.#reportError(error, 'flush'),
    )
  }

  /** The resolved, frozen options (secrets are not exposed). */
  get options(): Omit<ResolvedRelayOptions, 'signingKeys'> {
    const { signingKeys: _keys, ...rest } = this.#options
    return rest
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
   * One claim-and-deliver cycle: claims up to `concurrency` due lanes, delivers them, writes the marks, and
   * returns what happened. For tests, scripts and cron-style use; a long-running service calls {@link start}.
   */
  async runOnce(): Promise<RunOnceResult> {
    await this.#setUpMetrics()
    const { lanes } = await this.#claim(this.#options.concurrency)
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

  /** Starts claiming and delivering in the background. Calling it again while running does nothing. */
  async start(): Promise<void> {
    if (this.#closed) throw new Error('this relay was stopped; create a new Relay to start again')
    if (this.#state !== 'idle') return
    this.#state = 'running'
    this.#abort = new AbortController()
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
    this.#state = 'stopping'
    this.#wake?.()
    const lanes = this.#active.size
    let aborted = 0
    const abortTimer = setTimeout(() => {
      aborted = this.#active.size
      this.#abort.abort()
    }, timeoutMs)
    // Each lane finishes its current request (or is aborted at timeoutMs) and hands itself back through the mark
    // buffer. With the database unreachable those writes cannot land: wait a grace period, then give up on them
    // (their leases expire and another relay takes over — a delay, never a loss).
    // The loop too: it may be mid-claim, and the lanes that claim returns must be handed back with the rest.
    const settled = Promise.allSettled([...this.#active])
    await Promise.race([Promise.all([settled, this.#loop]), sleep(timeoutMs + STOP_GRACE_MS)])
    clearTimeout(abortTimer)
    // Lanes claimed ahead but never started go back untouched, in the same flush as everything else.
    for (const lane of this.#ready.splice(0)) {
      this.#marks.release({ claimToken: lane.claimToken, delivered: false })
    }
    await Promise.race([this.#marks.flush(), sleep(STOP_GRACE_MS)])
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
   * two round trips. It claims when the ready queue is half empty (batches of lanes, not one claim per finished
   * lane) or when a slot is free with nothing ready. Ready lanes hold a lease while they wait; the lease covers it
   * (each request is still checked against the lane's deadline) and `stop()` hands them back unopened.
   */
  async #run(): Promise<void> {
    const { concurrency, pollIntervalMs } = this.#options
    const refillAt = Math.ceil(concurrency / 2)
    let errors = 0
    while (this.#state === 'running') {
      this.#startReady()
      const wanted = 2 * concurrency - this.#active.size - this.#ready.length
      const slotFree = this.#active.size < concurrency
      let claimed = 0
      let windowFull = false
      if (wanted > 0 && (wanted >= refillAt || slotFree)) {
        try {
          const { lanes, windowFull: full } = await this.#claim(wanted)
          claimed = lanes.length
          windowFull = full
          errors = 0
          this.#ready.push(...lanes)
          if (this.#state !== 'running') break
          this.#startReady()
        } catch (error) {
          errors += 1
          this.#reportError(error, 'claim')
          await this.#idle(Math.min(30_000, pollIntervalMs * 2 ** Math.min(errors, 8)))
          continue
        }
      }
      if (this.#state !== 'running') break
      // A full claim may leave more due lanes behind it: go again at once. Otherwise wait for a lane to finish
      // (when room was what stopped us), a NOTIFY, a release with work left, or the poll interval.
      // A claim whose scan window filled up may have left due lanes past it: the same.
      const more = wanted > 0 && (claimed === wanted || windowFull)
      this.#roomBound = more || wanted <= 0 || (wanted < refillAt && !slotFree)
      if (more) continue
      await this.#idle(pollIntervalMs)
    }
  }

  /** Moves ready lanes into free delivery slots; a lane that finishes starts the next one itself. */
  #startReady(): void {
    while (this.#state === 'running' && this.#active.size < this.#options.concurrency) {
      const lane = this.#ready.shift()
      if (!lane) return
      const work = this.#deliver(lane)
      this.#active.add(work)
      // #deliver never rejects: every failure ends as an outcome.
      void work.then((result) => {
        this.#active.delete(work)
        this.#startReady()
        // A failure's outcome released the lane itself, and may have made something due now (a retry after 0 ms,
        // the event behind a dead letter under 'skip'): look at once rather than at the next poll. Failures are rare.
        if (this.#roomBound || result.failed > 0 || result.dead > 0) this.#requestWake()
      })
    }
  }

  /** Waits `ms`, or less when a wake-up arrives (NOTIFY, a lane finishing, stop). A wake-up that came while the
   * loop was busy is not lost: the next wait returns at once. */
  #idle(ms: number): Promise<void> {
    if (this.#wakeRequested) {
      this.#wakeRequested = false
      return Promise.resolve()
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.#wake = undefined
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.#wake = done
    })
  }

  async #claim(lanes: number): Promise<{ lanes: ClaimedLane[]; windowFull: boolean }> {
    const { db, schema, leaseMs, batchSize } = this.#options
    // Taken before the claim is sent: the local deadline can only be earlier than the database's.
    const deadline = performance.now() + leaseMs
    const { lanes: rows, windowFull } = await withCurrentSchema(schema, () =>
      claimLanes(db, schema, lanes, leaseMs, Math.max(lanes * SCAN_ROWS_PER_LANE, 256), batchSize),
    )
    if (rows.length === 0) return { lanes: [], windowFull }
    const byToken = new Map<string, ClaimedLane>()
    for (const row of rows) {
      byToken.set(row.claim_token, {
        aggregateType: row.aggregate_type,
        aggregateId: row.aggregate_id,
        claimToken: row.claim_token,
        conflictCount: row.conflict_count,
        deadline,
        events: row.events,
      })
    }
    const takenOver = rows.filter(
      (row) => row.taken_over && (byToken.get(row.claim_token)?.events.length ?? 0) > 0,
    )
    if (takenOver.length > 0) {
      const heads = takenOver.map((row) => ({
        claimToken: row.claim_token,
        id: byToken.get(row.claim_token)!.events[0]!.id,
      }))
      const attempts = await countTakeoverAttempts(db, schema, heads)
      for (const head of heads) {
        const lane = byToken.get(head.claimToken)!
        const counted = attempts.get(String(head.id))
        if (counted !== undefined) lane.events[0]!.attempts = counted
        this.#events.emit('lane:takeover', {
          aggregateType: lane.aggregateType,
          aggregateId: lane.aggregateId,
          eventId: lane.events[0]!.event_id,
          attempts: counted ?? lane.events[0]!.attempts,
        })
      }
    }
    return { lanes: [...byToken.values()], windowFull }
  }

  async #deliver(lane: ClaimedLane): Promise<LaneResult> {
    const context = this.#context()
    try {
      const head = lane.events[0]
      if (!head) {
        // Its events were delivered by the previous owner between our claim and our read: just hand it back.
        this.#marks.release({ claimToken: lane.claimToken, delivered: false })
        return { delivered: 0, failed: 0, dead: 0 }
      }
      if (head.attempts >= this.#options.maxAttempts) {
        // Taken over from claims that kept dying on this head: it has used its attempts.
        const result = { delivered: 0, failed: 0, dead: 0 }
        await settleFailure(
          context,
          lane,
          {
            eventId: head.event_id,
            type: head.event_type,
            aggregateType: head.aggregate_type,
            aggregateId: head.aggregate_id,
            sequence: Number(head.sequence),
            occurredAt: head.created_at.toISOString(),
            data: undefined,
          },
          {
            claimToken: lane.claimToken,
            id: head.id,
            attempts: head.attempts,
            httpStatus: null,
            error: 'claims on this event kept expiring without an outcome (the relay crashed or hung on it)',
            attemptedAt: new Date(),
          },
          undefined,
          result,
        )
        return result
      }
      return await deliverLane(context, lane)
    } catch (error) {
      // The database failed under us mid-lane; the lease will expire and another claim takes over.
      this.#reportError(error, 'outcome')
      return { delivered: 0, failed: 0, dead: 0 }
    }
  }

  #context(): LaneContext {
    return {
      options: this.#options,
      sender: this.#sender,
      marks: this.#marks,
      events: this.#events,
      stopping: () => this.#state === 'stopping',
      abort: this.#abort.signal,
    }
  }

  #reportError(error: unknown, during: RelayEventMap['relay:error']['during']): void {
    this.#options.logger.error({ err: error, during }, `relay ${during} failed; retrying`)
    this.#events.emit('relay:error', { error, during })
  }
}
