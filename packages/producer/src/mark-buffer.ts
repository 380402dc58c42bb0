import { backoffMs } from './backoff.js'
import { type Clock, sleep, systemClock } from './runtime.js'
import type { LaneRelease, SentMark } from './sql/mark-sent.js'

type Writer = (marks: readonly SentMark[], releases: readonly LaneRelease[]) => Promise<void>

/** What a {@link MarkBuffer} writes with, and when. */
export interface MarkBufferOptions {
  /** Writes one batch of marks and releases (one statement). */
  readonly write: Writer
  /** Told of every failed write; the batch is retried after a backoff. */
  readonly onError: (error: unknown) => void
  /** How long marks alone may wait for company. @defaultValue 20 */
  readonly delayMs?: number
  /** Marks that start a write at once. @defaultValue 1000 */
  readonly maxBatch?: number
  /** @defaultValue systemClock */
  readonly clock?: Clock
}

/**
 * Collects 2xx marks and lane releases and writes them in batches: one statement per flush instead of one
 * transaction per event. A flush starts when `maxBatch` marks are waiting, when a lane is released, or after
 * `delayMs`; only one runs at a time, so under load batches grow by themselves. A failed write (database away) is
 * retried with capped backoff; nothing is dropped until `abandon()`.
 *
 * Why marks alone may wait 20 ms: nothing waits for them — a lane reads on past its own unwritten marks and its
 * release flushes at once — and on one hot lane a 2 ms delay meant a commit per handful of events, which cost the
 * database more CPU than the deliveries did. The price is a crash window: marks not yet written are sent again.
 */
export class MarkBuffer {
  #marks: SentMark[] = []
  #releases: LaneRelease[] = []
  #waiters: (() => void)[] = []
  #running: Promise<void> | undefined
  /** The next write, waiting for `delayMs` on the clock or, when it is due at once, for the next turn of the loop. */
  #timer: { readonly delayed: unknown } | { readonly immediate: NodeJS.Immediate } | undefined
  #failures = 0
  #abandoned = false

  readonly #write: Writer
  readonly #onError: (error: unknown) => void
  readonly #delayMs: number
  readonly #maxBatch: number
  readonly #clock: Clock

  constructor(options: MarkBufferOptions) {
    this.#write = options.write
    this.#onError = options.onError
    this.#delayMs = options.delayMs ?? 20
    this.#maxBatch = options.maxBatch ?? 1000
    this.#clock = options.clock ?? systemClock
  }

  /** Queues a 2xx mark. */
  mark(mark: SentMark): void {
    this.#marks.push(mark)
    this.#schedule(this.#marks.length >= this.#maxBatch ? 0 : this.#delayMs)
  }

  /**
   * Queues a lane release and starts a flush at once (the lane is claimable again only when it is written). Nobody
   * waits for it: the lane stays leased until then, and `flush()` is there for whoever must know it landed.
   */
  release(release: LaneRelease): void {
    this.#releases.push(release)
    this.#schedule(0)
  }

  /** Writes everything queued so far; resolves when it is written. */
  flush(): Promise<void> {
    if (this.#marks.length === 0 && this.#releases.length === 0 && !this.#running) return Promise.resolve()
    const done = new Promise<void>((resolve) => this.#waiters.push(resolve))
    this.#schedule(0)
    return done
  }

  /** Gives up on whatever is still queued (the leases will expire) and resolves every waiter. */
  abandon(): number {
    this.#abandoned = true
    const dropped = this.#marks.length + this.#releases.length
    this.#marks = []
    this.#releases = []
    this.#cancelTimer()
    for (const resolve of this.#waiters.splice(0)) resolve()
    return dropped
  }

  get pending(): number {
    return this.#marks.length + this.#releases.length
  }

  /** True while a write runs or is about to start (not while marks wait out their delay). */
  get busy(): boolean {
    return this.#running !== undefined || (this.#timer !== undefined && 'immediate' in this.#timer)
  }

  #schedule(delayMs: number): void {
    if (this.#running || this.#abandoned) return
    if (this.#timer && delayMs > 0) return
    this.#cancelTimer()
    const start = () => {
      this.#timer = undefined
      this.#running = this.#run().finally(() => {
        this.#running = undefined
        // Releases and flush() callers queued during that write go at once; marks alone may wait for company.
        const urgent = this.#failures > 0 || this.#releases.length > 0 || this.#waiters.length > 0
        if (this.#marks.length > 0 || this.#releases.length > 0) this.#schedule(urgent ? 0 : this.#delayMs)
        else for (const resolve of this.#waiters.splice(0)) resolve()
      })
    }
    // "At once" is the next turn of the event loop, whatever the clock: releases of lanes finishing together then
    // share one write.
    this.#timer =
      delayMs > 0 ? { delayed: this.#clock.setTimeout(start, delayMs) } : { immediate: setImmediate(start) }
  }

  #cancelTimer(): void {
    const timer = this.#timer
    this.#timer = undefined
    if (timer === undefined) return
    if ('immediate' in timer) clearImmediate(timer.immediate)
    else this.#clock.clearTimeout(timer.delayed)
  }

  async #run(): Promise<void> {
    const marks = this.#marks
    const releases = this.#releases
    const waiters = this.#waiters
    this.#marks = []
    this.#releases = []
    this.#waiters = []
    if (marks.length === 0 && releases.length === 0) {
      for (const resolve of waiters) resolve()
      return
    }
    try {
      await this.#write(marks, releases)
      this.#failures = 0
      for (const resolve of waiters) resolve()
    } catch (error) {
      this.#onError(error)
      this.#failures += 1
      if (this.#abandoned) {
        for (const resolve of waiters) resolve()
        return
      }
      // Keep order: what failed goes back in front of anything queued meanwhile.
      this.#marks = marks.concat(this.#marks)
      this.#releases = releases.concat(this.#releases)
      this.#waiters = waiters.concat(this.#waiters)
      await sleep(this.#clock, backoffMs(this.#failures, { baseMs: 50, maxMs: 5000 }))
    }
  }
}
