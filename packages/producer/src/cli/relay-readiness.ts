import { Gauge, type Registry } from 'prom-client'
import type { Readiness } from './relay-http.js'

/** What {@link createReadiness} looks at. */
export interface ReadinessOptions {
  /** When the relay's claim loop last completed a pass (`relay.lastPassAt`). */
  readonly lastPassAt: () => Date | undefined
  /** True once a stop began: a draining relay takes no new work, so it should get no new traffic either. */
  readonly stopping: () => boolean
  /** Why the relay has not started yet (it waits for its database), or undefined once it has. */
  readonly waiting?: () => string | undefined
  /** Asks the database a trivial question (`SELECT 1`); rejects when it does not answer. */
  readonly ping: () => Promise<void>
  /** A loop that completed no pass for this long is stalled. */
  readonly stallMs: number
  /** How long the ping may take before the database counts as not answering. */
  readonly timeoutMs: number
  /** The operator's words for a failed ping (e.g. "connection refused"); never the connection string. */
  readonly explain: (error: unknown) => string
}

/** How long one answer serves every probe and scrape that asks for it (they come from several sides at once). */
const CACHE_MS = 1000

/**
 * The relay's readiness: it is not waiting for its database to come up, the database answers a `SELECT 1` within
 * `timeoutMs`, AND the claim loop completed a pass within `stallMs` (a loop stuck on a connection that went silent
 * delivers nothing, though its process is fine), AND no stop began. One check runs at a time; its answer is reused for a second.
 */
export function createReadiness(options: ReadinessOptions): () => Promise<Readiness> {
  let cached: { at: number; value: Promise<Readiness> } | undefined
  const check = async (): Promise<Readiness> => {
    if (options.stopping()) return { ready: false, reason: 'stopping: draining in-flight requests' }
    const waiting = options.waiting?.()
    if (waiting !== undefined) return { ready: false, reason: `waiting for the database: ${waiting}` }
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        options.ping(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no answer within ${options.timeoutMs} ms`)),
            options.timeoutMs,
          )
        }),
      ])
    } catch (error) {
      return { ready: false, reason: `database: ${options.explain(error)}` }
    } finally {
      clearTimeout(timer)
    }
    const last = options.lastPassAt()
    if (last === undefined)
      return { ready: false, reason: 'starting: the claim loop has not completed a pass yet' }
    const sinceMs = Date.now() - last.getTime()
    if (sinceMs > options.stallMs) {
      return {
        ready: false,
        reason: `claim loop stalled: no pass completed for ${Math.round(sinceMs / 1000)} s (limit ${Math.round(options.stallMs / 1000)} s)`,
      }
    }
    return { ready: true }
  }
  return () => {
    const now = performance.now()
    if (!cached || now - cached.at > CACHE_MS) cached = { at: now, value: check() }
    return cached.value
  }
}

/**
 * Registers `outbox_relay_ready` (1 ready, 0 not), read at scrape time from `readiness`: an alert on a relay that
 * stays unready needs no probe of its own, and the scrape's `up` covers a relay that is gone.
 */
export function registerReadyGauge(register: Registry, readiness: () => Promise<Readiness>): void {
  new Gauge({
    name: 'outbox_relay_ready',
    help: 'Whether this relay is ready (1) or not (0): the database answers and the claim loop completes passes.',
    registers: [register],
    async collect() {
      this.set((await readiness()).ready ? 1 : 0)
    },
  })
}
