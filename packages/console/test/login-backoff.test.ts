import { describe, expect, it } from 'vitest'
import {
  BACKOFF_BASE_MS,
  BACKOFF_FORGET_MS,
  BACKOFF_MAX_MS,
  CLIENT_FREE_FAILURES,
  GLOBAL_FREE_FAILURES,
  LoginBackoff,
} from '../src/login-backoff.js'

describe('LoginBackoff', () => {
  it('lets a client fail freely a few times, then doubles its wait at each further failure', () => {
    const backoff = new LoginBackoff()
    let now = 1_000_000
    for (let i = 0; i < CLIENT_FREE_FAILURES - 1; i++) {
      expect(backoff.check('a', now).allowed).toBe(true)
      expect(backoff.fail('a', now)).toEqual([])
    }
    expect(backoff.fail('a', now)).toEqual([{ scope: 'client', failures: CLIENT_FREE_FAILURES }])
    expect(backoff.check('a', now)).toEqual({
      allowed: false,
      retryAfterMs: BACKOFF_BASE_MS,
      scope: 'client',
    })
    // Another client is not held back by this one.
    expect(backoff.check('b', now).allowed).toBe(true)
    now += BACKOFF_BASE_MS
    expect(backoff.check('a', now).allowed).toBe(true)
    // The next failure doubles the wait, and starts no new burst (nothing more to log).
    expect(backoff.fail('a', now)).toEqual([])
    expect(backoff.check('a', now)).toEqual({
      allowed: false,
      retryAfterMs: 2 * BACKOFF_BASE_MS,
      scope: 'client',
    })
  })

  it('caps the wait, forgets a quiet client, and clears a client on success', () => {
    const backoff = new LoginBackoff()
    let now = 0
    for (let i = 0; i < CLIENT_FREE_FAILURES + 40; i++) {
      backoff.fail('a', now)
      now += BACKOFF_MAX_MS
    }
    now -= BACKOFF_MAX_MS
    expect(backoff.check('a', now)).toEqual({ allowed: false, retryAfterMs: BACKOFF_MAX_MS, scope: 'client' })
    expect(backoff.check('a', now + BACKOFF_FORGET_MS + 1).allowed).toBe(true)
    for (let i = 0; i < CLIENT_FREE_FAILURES; i++) backoff.fail('c', now)
    expect(backoff.check('c', now).allowed).toBe(false)
    backoff.succeed('c')
    expect(backoff.check('c', now).allowed).toBe(true)
  })

  it('throttles every client once failures from all of them pass the global allowance, and says so once', () => {
    const backoff = new LoginBackoff()
    const now = 5_000
    const starts = []
    for (let i = 0; i < GLOBAL_FREE_FAILURES; i++) starts.push(...backoff.fail(`client-${i}`, now))
    expect(starts).toEqual([{ scope: 'global', failures: GLOBAL_FREE_FAILURES }])
    expect(backoff.check('never-failed', now)).toEqual({
      allowed: false,
      retryAfterMs: BACKOFF_BASE_MS,
      scope: 'global',
    })
  })
})
