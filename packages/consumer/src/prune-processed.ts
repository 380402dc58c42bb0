import { setTimeout as delay } from 'node:timers/promises'
import { type Duration, parseDuration } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import { OutboxError } from './errors.js'
import { consoleLogger, type Logger, safeLog } from './logger.js'
import { checkDatabase, checkSchema } from './options.js'
import { type ConsumerDatabase, inSchema } from './schema.js'
import { deleteProcessedBatch } from './sql/delete-processed-batch.js'
import { hasExpiredProcessed } from './sql/has-expired-processed.js'

/**
 * Options of {@link pruneProcessed}.
 *
 * @example
 * ```ts
 * import type { PruneProcessedOptions } from '@outbox/consumer'
 * const nightly: PruneProcessedOptions = { retention: '30d', batchSize: 5000, maxBatches: 200, pauseMs: 20 }
 * ```
 */
export interface PruneProcessedOptions {
  /**
   * Keep ids received within this window: milliseconds, or a string such as `'30d'`, `'36h'`, `'90m'`. Must cover
   * the producer's retry horizon (≈ 27.6 h by default) + its dead-letter retention + any replay window.
   */
  readonly retention: number | string
  /** Rows deleted per statement (one short transaction each). @defaultValue 1000 */
  readonly batchSize?: number
  /** Most batches in one call; the caller runs it again if `caughtUp` is false. @defaultValue 100 */
  readonly maxBatches?: number
  /** Pause between batches, to leave room for live traffic. @defaultValue 0 */
  readonly pauseMs?: number
  /** Schema of the consumer tables (as given to `migrate`): a lower-case SQL identifier. @defaultValue 'public' */
  readonly schema?: string
  /**
   * Prune only the ids of this consumer `source` — for a sender that needs its own retention (Stripe retries for up
   * to 3 days). Left out, every source's ids past the retention go. @defaultValue every source
   */
  readonly source?: string
  /** Told about a retention shorter than the producer's retry horizon. @defaultValue warn/error to the console */
  readonly logger?: Logger
  /** Stops between batches when aborted (the result then says `caughtUp: false`). */
  readonly signal?: AbortSignal
}

/**
 * What one {@link pruneProcessed} call did.
 *
 * @example
 * ```ts
 * import type { PruneProcessedResult } from '@outbox/consumer'
 * const report = (result: PruneProcessedResult) => `${result.removed} removed, caught up: ${result.caughtUp}`
 * ```
 */
export interface PruneProcessedResult {
  /** Rows of `processed_events` deleted. */
  readonly removed: number
  /** True when nothing older than the retention is left; false when `maxBatches` (or the signal) stopped it first. */
  readonly caughtUp: boolean
}

/**
 * Default rows per batch of {@link pruneProcessed} (the producer's `prune` deletes 5000 per batch: its rows are
 * its own, while these share a table with live deliveries).
 *
 * @example
 * ```ts
 * import { DEFAULT_PROCESSED_PRUNE_BATCH_SIZE } from '@outbox/consumer'
 * const batchSize = DEFAULT_PROCESSED_PRUNE_BATCH_SIZE * 5
 * ```
 */
export const DEFAULT_PROCESSED_PRUNE_BATCH_SIZE = 1000
/** @deprecated Use {@link DEFAULT_PROCESSED_PRUNE_BATCH_SIZE} (the producer's constant of this name is 5000). */
export const DEFAULT_PRUNE_BATCH_SIZE = DEFAULT_PROCESSED_PRUNE_BATCH_SIZE
/**
 * Default maximum batches per {@link pruneProcessed} call.
 *
 * @example
 * ```ts
 * import { DEFAULT_PROCESSED_PRUNE_MAX_BATCHES } from '@outbox/consumer'
 * const maxBatches = DEFAULT_PROCESSED_PRUNE_MAX_BATCHES * 2
 * ```
 */
export const DEFAULT_PROCESSED_PRUNE_MAX_BATCHES = 100
/** @deprecated Use {@link DEFAULT_PROCESSED_PRUNE_MAX_BATCHES} (the producer's constant of this name is 200). */
export const DEFAULT_PRUNE_MAX_BATCHES = DEFAULT_PROCESSED_PRUNE_MAX_BATCHES

/** The producer's default retry horizon (5 s + 5 m + 30 m + 2 h + 5 h + 10 h + 10 h, +20% jitter), rounded up. */
const PRODUCER_RETRY_HORIZON_MS = 28 * 3_600_000

/**
 * Turns `'30d'`, `'12h'`, `'90m'`, `'45s'`, `'500ms'` or a number of milliseconds into milliseconds.
 * @deprecated Use `parseDuration(value, 'retention')` from `@outbox/protocol` (the one parser: `w` and decimals too).
 */
export function parseRetentionMs(retention: unknown): number {
  // Its old forms only (whole amounts, no weeks), so a caller relying on it sees no change for this release.
  const legacy = typeof retention !== 'string' || /^\s*\d+\s*(ms|s|m|h|d)\s*$/.test(retention)
  return checkRetention(retention, legacy)
}

/** The retention in milliseconds: a positive duration, with the protocol's one parser. */
function checkRetention(retention: unknown, accepted = true): number {
  let ms = Number.NaN
  try {
    if (accepted) ms = parseDuration(retention as Duration, 'retention')
  } catch {
    // Reported below, with the function's name and the positive bound.
  }
  if (ms > 0) return ms
  throw new OutboxError(
    'ERR_OUTBOX_INVALID_OPTION',
    `pruneProcessed: \`retention\` must be a positive number of milliseconds or a string like '30d', '36h', '90m' (got ${JSON.stringify(retention)})`,
    { option: 'retention' },
  )
}

function positiveInteger(value: unknown, name: string, fallback: number, allowZero = false): number {
  if (value === undefined) return fallback
  if (typeof value === 'number' && Number.isSafeInteger(value) && (value > 0 || (allowZero && value === 0))) {
    return value
  }
  throw new OutboxError(
    'ERR_OUTBOX_INVALID_OPTION',
    `pruneProcessed: \`${name}\` must be a ${allowZero ? 'non-negative' : 'positive'} whole number (got ${String(value)})`,
    { option: name },
  )
}

/**
 * Deletes `processed_events` rows older than the retention — every source's, or one `source`'s — in bounded
 * batches, and never touches `consumer_cursors`.
 *
 * Each batch is one short statement on the oldest rows, so pruning never holds many locks or stalls deliveries;
 * the call stops after `maxBatches` and reports `caughtUp: false` if more remain. Retention rule: keep ids longer
 * than the producer can still (re)send them — its retry horizon (≈ 27.6 h by default) + its dead-letter
 * retention + any replay window. Under `'monotonic'`/`'strict'` the cursor still stops a very late duplicate
 * whose id was pruned (it is at or below the cursor, so `stale_ignored`); under `'off'` retention is the only guard.
 * Several senders in one schema: a retention that covers the longest of their retry windows, or one call per
 * `source` with its own.
 *
 * @example
 * ```ts
 * import { createPool, pruneProcessed } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const { removed, caughtUp } = await pruneProcessed(db, { retention: '30d', batchSize: 5000, pauseMs: 50 })
 * console.log(`pruned ${removed} ids${caughtUp ? '' : ', more to do'}`)
 * ```
 */
export async function pruneProcessed(
  db: Kysely<any>,
  options: PruneProcessedOptions,
): Promise<PruneProcessedResult> {
  checkDatabase(db, 'pruneProcessed')
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      "pruneProcessed: pass options, e.g. { retention: '30d' }",
    )
  }
  const retentionMs = checkRetention(options.retention)
  const batchSize = positiveInteger(options.batchSize, 'batchSize', DEFAULT_PROCESSED_PRUNE_BATCH_SIZE)
  const maxBatches = positiveInteger(options.maxBatches, 'maxBatches', DEFAULT_PROCESSED_PRUNE_MAX_BATCHES)
  const pauseMs = positiveInteger(options.pauseMs, 'pauseMs', 0, true)
  const schema = checkSchema(options.schema, 'pruneProcessed')
  const source = options.source
  if (
    source !== undefined &&
    (typeof source !== 'string' || source.length === 0 || source.length > 255 || source.includes('\u0000'))
  ) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `pruneProcessed: \`source\` must be a consumer's source name (1 to 255 characters without NUL), or left out to prune every source (got ${JSON.stringify(source)})`,
      { option: 'source' },
    )
  }
  const logger = options.logger ?? consoleLogger
  if (retentionMs < PRODUCER_RETRY_HORIZON_MS) {
    safeLog(
      logger,
      'warn',
      { retentionMs },
      'pruneProcessed: retention is shorter than the producer retry horizon (≈ 28 h)',
    )
  }

  const own = inSchema(db as Kysely<ConsumerDatabase>, schema)
  let removed = 0
  for (let batch = 0; batch < maxBatches; batch++) {
    if (batch > 0 && pauseMs > 0) await pause(pauseMs, options.signal)
    if (options.signal?.aborted) return { removed, caughtUp: false }
    const deleted = await deleteProcessedBatch(own, { retentionMs, batchSize, source })
    removed += deleted
    if (deleted < batchSize) return { removed, caughtUp: true }
  }
  // The budget ran out on a full batch: it finished only if nothing past retention is left.
  return { removed, caughtUp: !(await hasExpiredProcessed(own, retentionMs, source)) }
}

/** Waits `ms`, or less if `signal` aborts, so a stopping service does not wait out a long pause. */
async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  // An abort ends the wait early; the caller sees `signal.aborted` and stops, so the rejection is not an error.
  await delay(ms, undefined, { signal }).catch(() => {})
}
