import type { RequestHandler } from 'express'

/** What {@link injectFaults} did so far. */
export interface FaultCounts {
  /** Webhook requests that reached the subscriber. */
  requests: number
  /** Answered HTTP 500 before anything ran. */
  failed: number
  /** Applied and committed, then the connection was cut instead of answering. */
  dropped: number
}

/** Options of {@link injectFaults}. */
export interface FaultOptions {
  /** Share of requests answered 500 at once. */
  readonly failureRate: number
  /** Share of the remaining requests whose answer is dropped after the subscriber committed. */
  readonly dropRate: number
  /**
   * Slow answers: every request waits a random time from `min` to `max` ms before anything else happens, as a
   * subscriber behind an overloaded dependency would. @defaultValue none
   */
  readonly delayMs?: { readonly min: number; readonly max: number }
  readonly random: () => number
  readonly counts: FaultCounts
}

/**
 * Express middleware, mounted in front of the subscriber's webhook route, that makes it unreliable on
 * purpose: it may hold every request a while, fails some requests outright, and for others lets `dedupe` apply
 * and commit the event but cuts the connection instead of sending the answer. The relay cannot tell the second kind from a crash before the
 * commit, so it sends the event again, and the consumer must recognise the duplicate.
 */
export function injectFaults({
  failureRate,
  dropRate,
  delayMs,
  random,
  counts,
}: FaultOptions): RequestHandler {
  const misbehave: RequestHandler = (req, res, next) => {
    if (random() < failureRate) {
      counts.failed += 1
      res.status(500).json({ error: 'failure injected by the demo' })
      return
    }
    if (random() < dropRate) {
      // dedupe answers only after its transaction committed, so at end() the event is applied for good.
      const end = res.end.bind(res) as (...args: unknown[]) => typeof res
      res.end = ((...args: unknown[]) => {
        if (res.statusCode >= 300) return end(...args)
        counts.dropped += 1
        req.socket.destroy()
        return res
      }) as typeof res.end
    }
    next()
  }
  return (req, res, next) => {
    counts.requests += 1
    if (!delayMs) {
      misbehave(req, res, next)
      return
    }
    // Held before anything runs, so each request takes its webhook slot (and the relay's lane) that much longer.
    const wait = delayMs.min + random() * (delayMs.max - delayMs.min)
    setTimeout(() => misbehave(req, res, next), wait)
  }
}
