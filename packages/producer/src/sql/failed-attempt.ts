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
}
