/** Failed logins a client may make before it has to wait. */
export const CLIENT_FREE_FAILURES = 5
/**
 * Failed logins from every client together before every client has to wait: a guesser spread over many addresses
 * is slowed down too. Bearer requests and open sessions are not affected.
 */
export const GLOBAL_FREE_FAILURES = 50
/** The first wait, doubled at each further failure. */
export const BACKOFF_BASE_MS = 1000
/** The longest wait. */
export const BACKOFF_MAX_MS = 15 * 60_000
/** A record is forgotten after this long without a failure: the next failure starts afresh. */
export const BACKOFF_FORGET_MS = 30 * 60_000
/** Clients remembered at most: the least recently failed is dropped past it, so a flood cannot grow memory. */
const MAX_CLIENTS = 10_000

interface Record {
  failures: number
  lastFailureAt: number
}

/** What {@link LoginBackoff.check} decides for a login attempt. */
export type LoginDecision =
  | { readonly allowed: true }
  | { readonly allowed: false; readonly retryAfterMs: number; readonly scope: 'client' | 'global' }

/** A burst of failures that just began to be throttled: the one time it is logged. */
export interface ThrottleStart {
  readonly scope: 'client' | 'global'
  readonly failures: number
}

function waitMs(record: Record | undefined, free: number, now: number): number {
  if (record === undefined || record.failures < free) return 0
  const delay = Math.min(BACKOFF_BASE_MS * 2 ** (record.failures - free), BACKOFF_MAX_MS)
  return Math.max(0, record.lastFailureAt + delay - now)
}

/**
 * The login throttle, a pure decision over an injected time: per client and over all clients, the first failures
 * are free, then each failure doubles the wait before the next attempt is even checked (so a throttled guess
 * learns nothing). A success clears its client's record. It holds no timers; time is whatever `now` says.
 */
export class LoginBackoff {
  readonly #clients = new Map<string, Record>()
  #global: Record | undefined

  /** Whether `client` may try a token at `now`, and if not for how long it must wait. */
  check(client: string, now: number): LoginDecision {
    this.#forget(client, now)
    const clientWait = waitMs(this.#clients.get(client), CLIENT_FREE_FAILURES, now)
    const globalWait = waitMs(this.#global, GLOBAL_FREE_FAILURES, now)
    if (clientWait === 0 && globalWait === 0) return { allowed: true }
    return clientWait >= globalWait
      ? { allowed: false, retryAfterMs: clientWait, scope: 'client' }
      : { allowed: false, retryAfterMs: globalWait, scope: 'global' }
  }

  /**
   * Counts a failed login of `client` at `now`. Returns the throttles this failure started (a client's or the
   * global one reaching its free failures), so the caller logs each burst once rather than each attempt.
   */
  fail(client: string, now: number): ThrottleStart[] {
    this.#forget(client, now)
    const started: ThrottleStart[] = []
    const record = this.#clients.get(client) ?? { failures: 0, lastFailureAt: now }
    record.failures += 1
    record.lastFailureAt = now
    // Re-inserted so the map's order is least recently failed first, which is what gets dropped.
    this.#clients.delete(client)
    this.#clients.set(client, record)
    if (record.failures === CLIENT_FREE_FAILURES) started.push({ scope: 'client', failures: record.failures })
    while (this.#clients.size > MAX_CLIENTS) this.#clients.delete(this.#clients.keys().next().value!)
    const global = this.#global ?? { failures: 0, lastFailureAt: now }
    global.failures += 1
    global.lastFailureAt = now
    this.#global = global
    if (global.failures === GLOBAL_FREE_FAILURES) started.push({ scope: 'global', failures: global.failures })
    return started
  }

  /** A good login of `client`: its own record is cleared (the global one decays on its own). */
  succeed(client: string): void {
    this.#clients.delete(client)
  }

  #forget(client: string, now: number): void {
    const record = this.#clients.get(client)
    if (record !== undefined && now - record.lastFailureAt > BACKOFF_FORGET_MS) this.#clients.delete(client)
    if (this.#global !== undefined && now - this.#global.lastFailureAt > BACKOFF_FORGET_MS)
      this.#global = undefined
  }
}
