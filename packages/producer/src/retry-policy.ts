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
  return Math.max(0, Math.round(delayMs * (1 - RETRY_JITTER + 2 * RETRY_JITTER * random())))
}

/**
 * The wait before the next attempt after `attempts` failed ones (1-based), or null when they are used up.
 * `maxAttempts = schedule.length + 1`.
 */
export function retryDelay(schedule: readonly number[], attempts: number): number | null {
  const base = schedule[attempts - 1]
  return base === undefined ? null : jitter(base)
}

/**
 * The park time after the `count`-th consecutive 409: doubling from the first retry delay (at least {@link MIN_CONFLICT_PARK_MS}), capped at {@link MAX_CONFLICT_PARK_MS}.
 */
export function conflictParkDelay(schedule: readonly number[], count: number): number {
  const base = Math.max(schedule[0] ?? 1000, MIN_CONFLICT_PARK_MS)
  return jitter(Math.min(MAX_CONFLICT_PARK_MS, base * 2 ** Math.min(count - 1, 20)))
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
