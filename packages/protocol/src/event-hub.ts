import type { Logger } from './logger.js'

/**
 * A minimal typed emitter shared by the relay (`delivery:*`, `lane:*`, `relay:*`) and the consumer (`receipt:*`):
 * listeners that throw are caught and logged, and there is no bare `'error'` event, so an unheard failure never
 * crashes the process (Node's EventEmitter throws on one).
 *
 * @example
 * ```ts
 * import { EventHub, silentLogger } from '@outbox/protocol'
 *
 * const hub = new EventHub<{ 'job:done': { id: string } }>(silentLogger, 'jobs')
 * const off = hub.on('job:done', ({ id }) => console.log(id))
 * hub.emit('job:done', { id: 'a' })
 * off()
 * ```
 */
export class EventHub<Events extends object> {
  readonly #listeners = new Map<keyof Events, Set<(payload: never) => void>>()
  readonly #logger: Logger
  readonly #owner: string

  /** @param owner names the emitter in the log line of a listener that threw (e.g. 'relay', 'consumer'). */
  constructor(logger: Logger, owner: string) {
    this.#logger = logger
    this.#owner = owner
  }

  /** Adds a listener; returns a function that removes it. */
  on<K extends keyof Events>(name: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.#listeners.get(name)
    if (!set) {
      set = new Set()
      this.#listeners.set(name, set)
    }
    set.add(listener as (payload: never) => void)
    return () => this.off(name, listener)
  }

  /** Adds a listener called at most once. */
  once<K extends keyof Events>(name: K, listener: (payload: Events[K]) => void): () => void {
    const off = this.on(name, (payload) => {
      off()
      listener(payload)
    })
    return off
  }

  /** Removes a listener added by {@link EventHub.on}. */
  off<K extends keyof Events>(name: K, listener: (payload: Events[K]) => void): void {
    this.#listeners.get(name)?.delete(listener as (payload: never) => void)
  }

  /** Whether anyone listens (lets the emitter skip building payloads nobody reads). */
  has(name: keyof Events): boolean {
    return (this.#listeners.get(name)?.size ?? 0) > 0
  }

  /**
   * Calls every listener of `name`; one that throws — or, async, rejects — is logged and the others still run.
   */
  emit<K extends keyof Events>(name: K, payload: Events[K]): void {
    const set = this.#listeners.get(name)
    if (!set) return
    const report = (error: unknown) =>
      this.#logger.error(
        { event: name, err: error },
        `a ${this.#owner} event listener threw; the ${this.#owner} carries on`,
      )
    for (const listener of [...set]) {
      try {
        const returned: unknown = (listener as (payload: Events[K]) => unknown)(payload)
        // An async listener that rejects would be an unhandled rejection, which ends a Node process: log it too.
        if (typeof (returned as PromiseLike<unknown> | undefined)?.then === 'function') {
          ;(returned as PromiseLike<unknown>).then(undefined, report)
        }
      } catch (error) {
        report(error)
      }
    }
  }
}
