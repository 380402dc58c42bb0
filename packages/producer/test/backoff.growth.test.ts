import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { backoffMs } from '../src/backoff.js'
import { LISTEN_MAX_BACKOFF_MS, LISTEN_MIN_BACKOFF_MS } from '../src/listen.js'
import { conflictParkDelay, MAX_CONFLICT_PARK_MS } from '../src/retry-policy.js'

const draws = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })

describe('backoffMs', () => {
  it('doubles from baseMs, stops at maxMs, and never draws without jitter', () => {
    expect([0, 1, 2, 3, 4, 5].map((n) => backoffMs(n, { baseMs: 100, maxMs: 1000 }))).toEqual([
      100, 200, 400, 800, 1000, 1000,
    ])
    expect(backoffMs(5000, { baseMs: 1, maxMs: 30_000 })).toBe(30_000)
    const random = () => {
      throw new Error('drew without jitter')
    }
    expect(backoffMs(2, { baseMs: 50, maxMs: 5000, random })).toBe(200)
  })

  it('spreads by ±jitter around the capped delay', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 1, max: 10_000 }),
        draws,
        (n, baseMs, r) => {
          const maxMs = 60_000
          const delay = Math.min(maxMs, baseMs * 2 ** n)
          const spread = backoffMs(n, { baseMs, maxMs, jitter: 0.5, random: () => r })
          expect(spread).toBeGreaterThanOrEqual(Math.floor(delay * 0.5))
          expect(spread).toBeLessThanOrEqual(Math.ceil(delay * 1.5))
        },
      ),
    )
  })

  // The three retry loops each had their own formula; these pin that the one function waits exactly as they did.
  it('waits as the claim loop, the mark buffer and the LISTEN reconnects did before it', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 60 }),
        fc.integer({ min: 1, max: 5000 }),
        draws,
        (n, pollMs, r) => {
          expect(
            backoffMs(n, { baseMs: pollMs, maxMs: Math.min(30_000, pollMs * 2 ** 8) }),
            'claim loop',
          ).toBe(Math.min(30_000, pollMs * 2 ** Math.min(n, 8)))
          expect(backoffMs(n, { baseMs: 50, maxMs: 5000 }), 'mark buffer').toBe(
            Math.min(5000, 50 * 2 ** Math.min(n, 7)),
          )
          expect(
            backoffMs(n - 1, {
              baseMs: LISTEN_MIN_BACKOFF_MS,
              maxMs: LISTEN_MAX_BACKOFF_MS,
              jitter: 0.5,
              random: () => r,
            }),
            'LISTEN reconnect',
          ).toBe(
            Math.round(
              Math.min(LISTEN_MAX_BACKOFF_MS, LISTEN_MIN_BACKOFF_MS * 2 ** Math.min(n - 1, 16)) * (0.5 + r),
            ),
          )
        },
      ),
    )
  })

  it('parks a lane after 409s as before: doubling from the first retry delay, capped, ±20%', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 60 }),
        fc.integer({ min: 0, max: 100_000 }),
        draws,
        (count, first, r) => {
          const base = Math.max(first, 100)
          const delay = Math.min(MAX_CONFLICT_PARK_MS, base * 2 ** Math.min(count - 1, 20))
          expect(conflictParkDelay([first], count, () => r)).toBe(
            Math.max(0, Math.round(delay * (1 - 0.2 + 2 * 0.2 * r))),
          )
        },
      ),
    )
  })
})
