import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_RETRY_SCHEDULE,
  decideAfterFailure,
  jitter,
  MAX_RETRY_AFTER_MS,
  RETRY_JITTER,
  retryAfterFloorMs,
  retryHorizonMs,
} from '../src/retry-policy.js'

const MAX_ATTEMPTS = DEFAULT_RETRY_SCHEDULE.length + 1
const HOUR = 3_600_000

describe('what follows a failed attempt', () => {
  it('the default schedule: 8 attempts, given up once the horizon (≈ 22 h, every delay at -20%) has passed', () => {
    expect(retryHorizonMs(DEFAULT_RETRY_SCHEDULE)).toBe(79_444_000)
    const atMedian = () => 0.5
    expect(
      decideAfterFailure(DEFAULT_RETRY_SCHEDULE, MAX_ATTEMPTS, { attempts: 1, failingMs: 0 }, atMedian),
    ).toEqual({ kind: 'retry', delayMs: 5_000 })
    expect(
      decideAfterFailure(
        DEFAULT_RETRY_SCHEDULE,
        MAX_ATTEMPTS,
        { attempts: 8, failingMs: 27 * HOUR },
        atMedian,
      ),
    ).toEqual({ kind: 'dead' })
  })

  it('following the schedule, even at the shortest jitter, the last attempt is always past the horizon', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 10 * HOUR }), { maxLength: 10 }),
        fc.array(fc.double({ min: 0, max: 0.999_999, noNaN: true }), { minLength: 10, maxLength: 10 }),
        (schedule, draws) => {
          let failingMs = 0
          for (let attempts = 1; attempts <= schedule.length; attempts++) {
            const decision = decideAfterFailure(
              schedule,
              schedule.length + 1,
              { attempts, failingMs },
              () => draws[attempts - 1]!,
            )
            expect(decision.kind).toBe('retry')
            if (decision.kind === 'retry') failingMs += decision.delayMs
          }
          expect(
            decideAfterFailure(schedule, schedule.length + 1, { attempts: schedule.length + 1, failingMs })
              .kind,
          ).toBe('dead')
        },
      ),
    )
  })

  it('Retry-After sets the next delay within a floor that doubles per attempt and the cap, and never makes the give-up sooner', () => {
    const decide = (attempts: number, failingMs: number, retryAfterMs: number) =>
      decideAfterFailure(DEFAULT_RETRY_SCHEDULE, MAX_ATTEMPTS, { attempts, failingMs, retryAfterMs })
    expect(
      [1, 2, 3, 4, 7, 8, 11, 12].map((attempts) => retryAfterFloorMs(DEFAULT_RETRY_SCHEDULE, attempts)),
    ).toEqual([5_000, 10_000, 20_000, 40_000, 320_000, 640_000, 5_120_000, 10_240_000])
    expect(decide(1, 0, 1000)).toEqual({ kind: 'retry', delayMs: 5_000 })
    expect(decide(2, 5_000, 60_000)).toEqual({ kind: 'retry', delayMs: 60_000 })
    expect(decide(2, 5_000, 10 * HOUR)).toEqual({ kind: 'retry', delayMs: MAX_RETRY_AFTER_MS })
    // The floor never exceeds the attempt's own scheduled delay: a Retry-After is never later than the schedule
    // would have tried anyway, unless the header itself says so.
    expect(retryAfterFloorMs([100, 100, 100], 3)).toBe(100)
    // Attempts used up by early retries, horizon not reached: it keeps going at the header's pace, floored.
    expect(decide(8, 40_000, 1000)).toEqual({ kind: 'retry', delayMs: 640_000 })
    expect(decide(100, 40_000, 1000)).toEqual({ kind: 'retry', delayMs: MAX_RETRY_AFTER_MS })
    expect(decide(8, retryHorizonMs(DEFAULT_RETRY_SCHEDULE), 1000)).toEqual({ kind: 'dead' })
  })

  it('a subscriber answering Retry-After: 1 for a whole day is tried a few dozen times, not thousands', () => {
    let failingMs = 0
    let requests = 1
    for (;;) {
      const decision = decideAfterFailure(DEFAULT_RETRY_SCHEDULE, MAX_ATTEMPTS, {
        attempts: requests,
        failingMs,
        retryAfterMs: 1000,
      })
      if (decision.kind === 'dead') break
      failingMs += decision.delayMs
      requests += 1
    }
    expect(failingMs).toBeGreaterThanOrEqual(retryHorizonMs(DEFAULT_RETRY_SCHEDULE))
    expect(requests).toBeLessThan(40)
  })

  it('attempts used up early with no Retry-After on the last answer: one more try when the horizon is reached', () => {
    const horizon = retryHorizonMs(DEFAULT_RETRY_SCHEDULE)
    expect(
      decideAfterFailure(DEFAULT_RETRY_SCHEDULE, MAX_ATTEMPTS, { attempts: 8, failingMs: horizon - 1000 }),
    ).toEqual({
      kind: 'retry',
      delayMs: 1000,
    })
  })

  it('jitter stays within ±20%', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10 * HOUR }),
        fc.double({ min: 0, max: 0.999_999, noNaN: true }),
        (delay, draw) => {
          const jittered = jitter(delay, () => draw)
          expect(jittered).toBeGreaterThanOrEqual(Math.floor(delay * (1 - RETRY_JITTER)))
          expect(jittered).toBeLessThanOrEqual(Math.ceil(delay * (1 + RETRY_JITTER)))
        },
      ),
    )
  })
})
