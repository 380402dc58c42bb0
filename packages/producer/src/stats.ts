import type { Kysely } from 'kysely'
import { resolveSchema } from './schema-name.js'
import { readStats } from './sql/read-stats.js'

/** A snapshot of the outbox's health, all plain numbers. */
export interface OutboxStats {
  /** Age in seconds of the oldest undelivered event (0 when nothing is pending): the number to alert on. */
  readonly lagSeconds: number
  /** Events not yet delivered (including lanes waiting in backoff). */
  readonly pending: number
  /** Lanes a relay holds under a live lease right now. */
  readonly inFlight: number
  /** Lane heads that failed 3 or more times and are still being retried. */
  readonly struggling: number
  /** Dead-lettered events kept for inspection and redrive. */
  readonly dead: number
  /** Lanes parked by a 409 from the consumer or by an exhausted event under `onExhausted: 'block'`. */
  readonly blocked: number
}

/** A head with this many failed attempts counts as struggling. */
export const STRUGGLING_ATTEMPTS = 3

/**
 * Reads the outbox's health in one consistent snapshot (a single query).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { stats } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { lagSeconds, dead, blocked } = await stats(db)
 * if (lagSeconds > 300 || blocked > 0) console.warn('outbox needs attention')
 * ```
 */
export async function stats(
  db: Kysely<any>,
  options: { readonly schema?: string } = {},
): Promise<OutboxStats> {
  const row = await readStats(
    { db, schema: resolveSchema(options.schema) },
    { strugglingAttempts: STRUGGLING_ATTEMPTS },
  )
  return {
    lagSeconds: row.lag_seconds === null ? 0 : Math.max(0, Number(row.lag_seconds)),
    pending: Number(row.pending),
    inFlight: Number(row.in_flight),
    struggling: Number(row.struggling),
    dead: Number(row.dead),
    blocked: Number(row.blocked),
  }
}
