import { backoffMs, spreadMs } from './backoff.js'

/** Delays between attempts, like Svix: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h — eight attempts over ≈ 27.6 h. */
export const DEFAULT_RETRY_SCHEDULE: readonly number[] = Object.freeze([
  5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
])

/** Each delay is spread by ±20% so lanes that failed together do not retry together. */
export const RETRY_JITTER = 0.2

/** The longest `Retry-After` the relay honours; a longer one is capped (a misconfigured header must not park a lane for days). */
export const MAX_RETRY_AFTER_MS = 3_600_000

/** The shortest first park after a 409, whatever the schedule: a gap never heals in a few milliseconds. */
export const MIN_CONFLICT_PARK_MS = 100

/** The cap of a lane parked by 409 answers: waiting alone never heals a gap, so polling slowly is enough. */
export const MAX_CONFLICT_PARK_MS = 300_000

/** Applies ±{@link RETRY_JITTER} to a delay. */
export function jitter(delayMs: number, random: () => number = Math.random): number {
  return spreadMs(delayMs, RETRY_JITTER, random)
}

/**
 * How long an event must have been failing before it may be given up: the schedule's shortest possible span, every
 * delay at its −{@link RETRY_JITTER} (≈ 22 h for the default schedule). An event that followed the schedule has
 * always passed it by its last attempt, so this only holds back an event whose attempts came sooner (`Retry-After`).
 */
export function retryHorizonMs(schedule: readonly number[]): number {
  // Each delay's least jittered value, as {@link jitter} rounds it, so a schedule followed to its end always
  // reaches the horizon (rounding the sum instead fell short by a few ms on schedules of tiny delays).
  return schedule.reduce((sum, delay) => sum + Math.round(delay * (1 - RETRY_JITTER)), 0)
}

/** What a failed attempt leads to. */
export type FailureDecision = { readonly kind: 'dead' } | { readonly kind: 'retry'; readonly delayMs: number }

/** A failed attempt on a lane's head, as the decision needs it. */
export interface AttemptFailure {
  /** The head's failed attempts, this one included. */
  readonly attempts: number
  /** Milliseconds since its first failed attempt (0 for this first one). */
  readonly failingMs: number
  /** From `Retry-After` on a 429 or 503, when it was readable. */
  readonly retryAfterMs?: number
}

/**
 * The soonest a `Retry-After` may bring the next try after `attempts` failed ones: the schedule's first delay,
 * doubling with each failed attempt, and never later than the schedule's own delay for this attempt (past the
 * schedule: its last delay). With the default schedule: 5 s, 10 s, 20 s, … — so a subscriber deploying behind
 * `503 Retry-After: 5` gets its events seconds after it is back, while one that answers `Retry-After: 1` for a day is
 * tried about 30 times, not 17,000 (once an hour, {@link MAX_RETRY_AFTER_MS}, after the first eleven tries).
 */
export function retryAfterFloorMs(schedule: readonly number[], attempts: number): number {
  const first = schedule[0] ?? 0
  const scheduled = schedule[Math.min(attempts, schedule.length) - 1] ?? first
  return Math.min(scheduled, first * 2 ** Math.min(attempts - 1, 30))
}

/**
 * Decides what follows a failed attempt. The event is dead-lettered only once it has used `maxAttempts` attempts
 * AND has been failing for {@link retryHorizonMs}; until then it is retried:
 * - after `Retry-After` when the answer carried one, no sooner than {@link retryAfterFloorMs} and no later than
 *   {@link MAX_RETRY_AFTER_MS};
 * - otherwise after the schedule's delay for this attempt (±{@link RETRY_JITTER});
 * - otherwise (its attempts ran out early, because `Retry-After` brought them forward) when the horizon is reached.
 */
export function decideAfterFailure(
  schedule: readonly number[],
  maxAttempts: number,
  failure: AttemptFailure,
  random: () => number = Math.random,
): FailureDecision {
  const horizonMs = retryHorizonMs(schedule)
  if (failure.attempts >= maxAttempts && failure.failingMs >= horizonMs) return { kind: 'dead' }
  if (failure.retryAfterMs !== undefined) {
    const floorMs = retryAfterFloorMs(schedule, failure.attempts)
    return { kind: 'retry', delayMs: Math.min(MAX_RETRY_AFTER_MS, Math.max(floorMs, failure.retryAfterMs)) }
  }
  const scheduled = schedule[failure.attempts - 1]
  if (scheduled !== undefined) return { kind: 'retry', delayMs: jitter(scheduled, random) }
  return { kind: 'retry', delayMs: Math.max(0, horizonMs - failure.failingMs) }
}

/**
 * The park time after the `count`-th consecutive 409: doubling from the first retry delay (at least {@link MIN_CONFLICT_PARK_MS}), capped at {@link MAX_CONFLICT_PARK_MS}.
 */
export function conflictParkDelay(
  schedule: readonly number[],
  count: number,
  random: () => number = Math.random,
): number {
  const baseMs = Math.max(schedule[0] ?? 1000, MIN_CONFLICT_PARK_MS)
  return backoffMs(count - 1, { baseMs, maxMs: MAX_CONFLICT_PARK_MS, jitter: RETRY_JITTER, random })
}

/**
 * Reads a `Retry-After` header (delta-seconds or an HTTP date) into milliseconds, capped at
 * {@link MAX_RETRY_AFTER_MS}; undefined when absent or unreadable.
 */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const text = Array.isArray(value) ? value[0] : value
  if (!text) return undefined
  let ms: number
  if (/^\s*\d+\s*$/.test(text)) ms = Number(text) * 1000
  else {
    const date = Date.parse(text)
    if (Number.isNaN(date)) return undefined
    ms = date - now
  }
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, ms))
}
