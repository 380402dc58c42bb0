/**
 * Time and chance as the relay sees them. Production uses the process's own; a test may hand the relay a clock it
 * advances by command and a seeded random source, so leases, timeouts, backoffs and jitter run at their real values
 * without sleeping, and a run replays exactly. Not part of the public API.
 */
export interface Clock {
  /** Monotonic milliseconds (like `performance.now()`). */
  now(): number
  /** Calls `callback` once `ms` have passed on this clock. */
  setTimeout(callback: () => void, ms: number): unknown
  /** Cancels a timer from {@link Clock.setTimeout}; `undefined` is ignored. */
  clearTimeout(timer: unknown): void
}

/** The relay's clock and random source. */
export interface RelayRuntime {
  readonly clock: Clock
  /** Uniform in [0, 1), like `Math.random`. */
  readonly random: () => number
}

/** The process's monotonic clock and timers. */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  setTimeout: (callback: () => void, ms: number) => setTimeout(callback, ms),
  clearTimeout: (timer: unknown) => clearTimeout(timer as NodeJS.Timeout | undefined),
})

/** What every relay uses unless a test says otherwise. */
export const systemRuntime: RelayRuntime = Object.freeze({ clock: systemClock, random: Math.random })

/**
 * The key under which a test passes a {@link RelayRuntime} in the relay's options object
 * (`new Relay({ …options, [RELAY_RUNTIME]: runtime })`). A symbol, so it is no option a user can name or misspell.
 */
export const RELAY_RUNTIME: unique symbol = Symbol('outbox.relayRuntime')

/** The runtime a relay's options carry, or the system's. */
export function runtimeOf(options: object): RelayRuntime {
  return (options as { [RELAY_RUNTIME]?: RelayRuntime })[RELAY_RUNTIME] ?? systemRuntime
}

/** Resolves after `ms` on `clock`. */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms))
}

/**
 * Settles with `work`, or after `ms` on `clock` if that comes first, and clears its timer either way: a deadline
 * left pending after the race is decided keeps the process alive until it fires.
 */
export async function withDeadline(clock: Clock, ms: number, work: Promise<unknown>): Promise<void> {
  let timer: unknown
  const deadline = new Promise<void>((resolve) => {
    timer = clock.setTimeout(resolve, ms)
  })
  try {
    await Promise.race([work, deadline])
  } finally {
    clock.clearTimeout(timer)
  }
}

/**
 * Sleeps `ms` on `clock`, or less: while it sleeps, `setWake` holds the function that ends it at once (a NOTIFY, a
 * stop), and is given `undefined` when it ends either way — so a wake-up that comes between two sleeps is the
 * caller's to remember.
 */
export function interruptibleSleep(
  clock: Clock,
  ms: number,
  setWake: (wake: (() => void) | undefined) => void,
): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clock.clearTimeout(timer)
      setWake(undefined)
      resolve()
    }
    const timer = clock.setTimeout(done, ms)
    setWake(done)
  })
}
