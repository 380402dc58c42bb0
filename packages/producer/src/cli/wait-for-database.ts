import { backoffMs } from '../backoff.js'
import type { Logger } from '../logger.js'
import { isDatabaseNotYetUp, isOutboxSchemaMissing } from './describe-error.js'

/** First delay between two tries while the database is not up; doubles up to {@link DATABASE_WAIT_MAX_DELAY_MS}. */
export const DATABASE_WAIT_MIN_DELAY_MS = 250

/**
 * Longest delay between two tries: once the database answers, the relay starts within this long. A try is one
 * connection attempt, which costs a database that is not up nothing.
 */
export const DATABASE_WAIT_MAX_DELAY_MS = 5000

/** How often the wait is logged: once when it begins, then once per this interval, however many tries it took. */
export const DATABASE_WAIT_LOG_INTERVAL_MS = 30_000

/** What {@link waitForDatabase} needs. */
export interface DatabaseWaitOptions {
  /** The start-up check (the tables are there, the schema is not newer): resolves once the relay may start. */
  readonly check: () => Promise<void>
  /** The operator's words for a failed try (e.g. "connection refused"); never the connection string. */
  readonly explain: (error: unknown) => string
  readonly log: Logger
  /** Aborted by SIGINT/SIGTERM: the wait ends at once, and nothing starts. */
  readonly interrupt: AbortSignal
  /** Told why the relay waits (for `/readyz`), and `undefined` once the database answered. */
  readonly onWaiting?: (reason: string | undefined) => void
}

function pause(ms: number, interrupt: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      interrupt.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    interrupt.addEventListener('abort', done, { once: true })
  })
}

/**
 * Runs the start-up check until it passes, waiting while the database is not up yet: a relay started beside its
 * database (compose, a Kubernetes rollout, a host reboot) comes up before it, and exiting would only hand the
 * restart to an orchestrator — or leave the relay down where there is none. Tries with capped backoff and logs the
 * wait once when it begins and then once per {@link DATABASE_WAIT_LOG_INTERVAL_MS}, never once per try.
 *
 * Only "not up yet" is waited for: a wrong password, a missing database or any other failure is thrown at once, as
 * the check threw it. Missing outbox tables are thrown too when the database answered at the first try (a wrong
 * schema, a forgotten migration: waiting would hide it); after a wait they are waited for, since a migration
 * started beside the database is likely still running.
 *
 * Resolves `true` once the check passed, `false` when interrupted first.
 */
export async function waitForDatabase(options: DatabaseWaitOptions): Promise<boolean> {
  const { check, explain, log, interrupt, onWaiting } = options
  const startedAt = Date.now()
  let failures = 0
  let loggedAt = Number.NEGATIVE_INFINITY
  while (!interrupt.aborted) {
    try {
      await check()
    } catch (error) {
      const waiting = isDatabaseNotYetUp(error) || (failures > 0 && isOutboxSchemaMissing(error))
      if (!waiting) throw error
      const reason = explain(error)
      onWaiting?.(reason)
      const retryInMs = backoffMs(failures, {
        baseMs: DATABASE_WAIT_MIN_DELAY_MS,
        maxMs: DATABASE_WAIT_MAX_DELAY_MS,
        jitter: 0.2,
      })
      failures += 1
      const now = Date.now()
      if (now - loggedAt >= DATABASE_WAIT_LOG_INTERVAL_MS) {
        loggedAt = now
        log.warn(
          { reason, waitedSeconds: Math.round((now - startedAt) / 1000), tries: failures },
          `waiting for the database to answer; retrying (this line repeats every ${DATABASE_WAIT_LOG_INTERVAL_MS / 1000} s while it waits)`,
        )
      }
      await pause(retryInMs, interrupt)
      continue
    }
    onWaiting?.(undefined)
    if (failures > 0)
      log.info(
        { waitedSeconds: Math.round((Date.now() - startedAt) / 1000), tries: failures + 1 },
        'the database answers: starting',
      )
    return true
  }
  return false
}
