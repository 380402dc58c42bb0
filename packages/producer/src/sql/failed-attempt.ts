import type { AttemptRecord } from './delivery-attempt-log.js'

/** What the relay records about a failed attempt on a lane's head. */
export interface FailedAttempt {
  readonly claimToken: string
  /** Row id of the head. */
  readonly id: string
  /** The head's attempts including this one. */
  readonly attempts: number
  readonly httpStatus: number | null
  readonly error: string
  readonly attemptedAt: Date
  /** The attempt for the delivery log; absent when the relay does not log failures. */
  readonly log?: AttemptRecord
  /**
   * An attempt charged at a takeover (no request of this relay): logged only if the charge is made, i.e. the
   * statement still owns the lane.
   */
  readonly charged?: boolean
}
