/**
 * One event of a claimed lane, ready to send: the one camelCase form of the rows that `claimLanes` and
 * `selectLaneEvents` read, mapped once where they are read. Nothing above the `sql/` modules sees a stored row.
 */
export interface LaneEvent {
  readonly id: string
  readonly eventId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  readonly eventType: string
  /** The payload as JSON text, spliced into the body unparsed. */
  readonly payload: string
  /** Bytes of `payload`, as counted against the relay's buffer budget. */
  readonly payloadBytes: number
  readonly createdAt: Date
  /** Failed attempts so far. */
  readonly attempts: number
  /** Milliseconds since its first failed attempt, in database time when read; null when it never failed. */
  readonly failingMs: number | null
}

/** A lane a relay now owns, with the events its claim read and the relay-clock times around that claim. */
export interface ClaimedLane {
  /** The subscription this lane delivers to (the nil uuid for the implicit `endpoint` subscription). */
  readonly subscriptionId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly claimToken: string
  /** The previous claim expired without releasing: its relay died or hung. */
  readonly takenOver: boolean
  /**
   * The expired claim had started a request on this watched lane and never recorded an outcome: the head is owed
   * one failed attempt.
   */
  readonly charged: boolean
  /** The lane is watched (a claim of it once expired): record the claim before the first request. */
  readonly watchStarts: boolean
  /** Consecutive 409 parks so far, for the growing park delay. */
  readonly conflictCount: number
  /**
   * The lane was claimed as its subscription's breaker probe: its head's answer closes the breaker (any answer from
   * the endpoint but a failure) or opens it again.
   */
  readonly probe: boolean
  /** The head and rows behind it, in sequence order, within the byte budget; none if all were sent meanwhile. */
  readonly events: readonly LaneEvent[]
  /** Clock time (the relay's monotonic clock) when the claim was sent: no later than the database's lease start. */
  readonly claimedAt: number
  /**
   * Clock time when the claim's answer arrived: no earlier than the database's `now()` that measured each row's
   * failing time, so the time elapsed since can only be underestimated (a give-up is never early).
   */
  readonly readAt: number
  /** Clock time after which the lease may be gone: `claimedAt + leaseMs`. */
  readonly deadline: number
  /** Payload bytes of `events`, held against the relay's budget until the lane is done or handed back. */
  readonly heldBytes: number
}
