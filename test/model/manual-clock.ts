import type { Clock } from '../../packages/producer/src/runtime.js'

interface Timer {
  readonly at: number
  readonly order: number
  readonly callback: () => void
}

/**
 * A clock that moves only when told: the model advances it together with the database's time, so leases, request
 * timeouts, backoffs and the relay's slices run at their real values without anyone waiting for them. A timer due
 * at once (0 ms or less) fires on the next turn of the event loop, as a real one would, so nothing deadlocks on it.
 */
export class ManualClock implements Clock {
  #now = 0
  #order = 0
  readonly #timers = new Set<Timer>()

  now(): number {
    return this.#now
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const timer: Timer = { at: this.#now + Math.max(0, ms), order: this.#order++, callback }
    if (ms <= 0) {
      setImmediate(() => {
        if (this.#timers.delete(timer)) callback()
      })
    }
    this.#timers.add(timer)
    return timer
  }

  clearTimeout(timer: unknown): void {
    if (timer !== undefined) this.#timers.delete(timer as Timer)
  }

  /** Moves time forward by `ms`, firing every timer that falls due, in due order. */
  advance(ms: number): void {
    const until = this.#now + ms
    for (;;) {
      const next = [...this.#timers]
        .filter((timer) => timer.at <= until)
        .sort((a, b) => a.at - b.at || a.order - b.order)[0]
      if (!next) break
      this.#timers.delete(next)
      this.#now = Math.max(this.#now, next.at)
      next.callback()
    }
    this.#now = until
  }
}
