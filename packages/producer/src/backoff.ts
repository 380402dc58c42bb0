/** How {@link backoffMs} grows and spreads a delay. */
export interface BackoffOptions {
  /** The delay of attempt 0; each later attempt doubles it. */
  readonly baseMs: number
  /** The cap the doubling stops at (before jitter). */
  readonly maxMs: number
  /** Spread as a fraction of the delay: 0.5 draws from ±50%. @defaultValue 0 (no spread, no draw) */
  readonly jitter?: number
  /** Uniform in [0, 1), like `Math.random` (a test passes a seeded one). @defaultValue Math.random */
  readonly random?: () => number
}

/**
 * The capped exponential backoff every retry loop of the relay waits by — the claim loop after a failed claim, the
 * mark buffer after a failed write, the LISTEN connection after a lost one, a lane parked by 409s: `baseMs`
 * doubled `attempt` times, at most `maxMs`, then spread by ±`jitter` (rounded to whole milliseconds) so that
 * relays or lanes that failed together do not retry together.
 *
 * @example
 * ```ts
 * backoffMs(0, { baseMs: 100, maxMs: 30_000 }) // 100
 * backoffMs(3, { baseMs: 100, maxMs: 30_000, jitter: 0.5 }) // 400 ms ± 50%
 * ```
 */
export function backoffMs(attempt: number, options: BackoffOptions): number {
  const { baseMs, maxMs, jitter = 0, random = Math.random } = options
  // 2 ** a large attempt is Infinity, which the cap turns back into maxMs.
  const delayMs = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt))
  return jitter === 0 ? delayMs : spreadMs(delayMs, jitter, random)
}

/**
 * Spreads a delay by ±`jitter` (a fraction of it), rounded to whole milliseconds and never negative.
 *
 * @example
 * ```ts
 * spreadMs(5000, 0.2, Math.random) // between 4000 and 6000
 * ```
 */
export function spreadMs(delayMs: number, jitter: number, random: () => number): number {
  return Math.max(0, Math.round(delayMs * (1 - jitter + 2 * jitter * random())))
}
