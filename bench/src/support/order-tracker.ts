/** What the sink saw of one system's delivery order. */
export interface OrderReport {
  /** Events the workload contained (or, for a time-capped run, that could have been delivered). */
  readonly expected: number
  /** Distinct events received. */
  readonly received: number
  /** Repeated deliveries of an event already received. */
  readonly duplicates: number
  /** Events that arrived after a higher sequence of the same aggregate: per-aggregate order broken. */
  readonly violations: number
  /** True when every expected event arrived. */
  readonly complete: boolean
  /** True when a time cap ended the run on purpose (an incomplete run is then no failure). */
  readonly capped?: boolean
}

/**
 * Checks per-aggregate sequence order at the sink: an unseen sequence lower than one already received for the
 * same aggregate is a violation; a repeat of a received one is a duplicate (at-least-once allows it). Resolves
 * `done` when `expected` distinct events have arrived.
 */
export class OrderTracker {
  readonly #seen = new Map<string, { max: number; sequences: Set<number> }>()
  readonly #firstSeen: number[] = []
  #received = 0
  #duplicates = 0
  #violations = 0
  #resolve: (() => void) | undefined
  /** Resolves once every expected event has arrived. */
  readonly done: Promise<void>

  constructor(readonly expected: number) {
    this.done = new Promise((resolve) => {
      this.#resolve = resolve
    })
    if (expected === 0) this.#resolve?.()
  }

  /** Records one delivery; returns true when it was the first delivery of this event. */
  record(aggregateId: string, sequence: number, at: number): boolean {
    let lane = this.#seen.get(aggregateId)
    if (!lane) {
      lane = { max: 0, sequences: new Set() }
      this.#seen.set(aggregateId, lane)
    }
    if (lane.sequences.has(sequence)) {
      this.#duplicates += 1
      return false
    }
    if (sequence < lane.max) this.#violations += 1
    lane.sequences.add(sequence)
    lane.max = Math.max(lane.max, sequence)
    this.#received += 1
    this.#firstSeen.push(at)
    if (this.#received === this.expected) this.#resolve?.()
    return true
  }

  get received(): number {
    return this.#received
  }

  /** Monotonic times of first receipts, in arrival order. */
  get arrivals(): readonly number[] {
    return this.#firstSeen
  }

  report(capped = false, expected = this.expected): OrderReport {
    return {
      ...(capped ? { capped } : {}),
      expected,
      received: this.#received,
      duplicates: this.#duplicates,
      violations: this.#violations,
      complete: this.#received >= expected,
    }
  }
}
