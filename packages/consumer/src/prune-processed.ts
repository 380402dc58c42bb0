import type { Kysely } from 'kysely'
import { OutboxError } from './errors.js'
import { DEFAULT_LOGGER, type Logger, safeLog } from './logger.js'
import { checkDatabase, checkSchema } from './options.js'
import { type ConsumerDatabase, inSchema } from './schema.js'
import { deleteProcessedBatch } from './sql/delete-processed-batch.js'

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
  /** Schema of the consumer tables (as given to `migrate`). @defaultValue the search_path */
  readonly schema?: string
  /** Told about a retention shorter than the producer's retry horizon. @defaultValue warn/error to the console */
  readonly logger?: Logger
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
  /** True when the last batch was not full: nothing older than the retention is left (at that moment). */
  readonly caughtUp: boolean
}

/**
 * Default rows per batch of {@link pruneProcessed}.
 *
 * @example
 * ```ts
 * import { DEFAULT_PRUNE_BATCH_SIZE } from '@outbox/consumer'
 * const batchSize = DEFAULT_PRUNE_BATCH_SIZE * 5
 * ```
 */
export const DEFAULT_PRUNE_BATCH_SIZE = 1000
/**
 * Default maximum batches per {@link pruneProcessed} call.
 *
 * @example
 * ```ts
 * import { DEFAULT_PRUNE_MAX_BATCHES } from '@outbox/consumer'
 * const maxBatches = DEFAULT_PRUNE_MAX_BATCHES * 2
 * ```
 */
export const DEFAULT_PRUNE_MAX_BATCHES = 100

/** The producer's default retry horizon (5 s + 5 m + 30 m + 2 h + 5 h + 10 h + 10 h, +20% jitter), rounded up. */
const PRODUCER_RETRY_HORIZON_MS = 28 * 3_600_000

const UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** Turns `'30d'`, `'12h'`, `'90m'`, `'45s'`, `'500ms'` or a number of milliseconds into milliseconds. */
export function parseRetentionMs(retention: unknown): number {
  if (typeof retention === 'number' && Number.isSafeInteger(retention) && retention > 0) return retention
  if (typeof retention === 'string') {
    const match = /^\s*(\d+)\s*(ms|s|m|h|d)\s*$/.exec(retention)
    const amount = match ? Number(match[1]) * (UNITS_MS[match[2] ?? ''] ?? Number.NaN) : Number.NaN
    if (Number.isSafeInteger(amount) && amount > 0) return amount
  }
  throw new OutboxError(
    'ERR_OUTBOX_INVALID_OPTION',
    `pruneProcessed: \`retention\` must be a positive number of milliseconds or a string like '30d', '36h', '90m' (got ${JSON.stringify(retention)})`,
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
  )
}

/**
 * Deletes `processed_events` rows older than the retention, in bounded batches, and never touches
 * `consumer_cursors`.
 *
 * Each batch is one short statement on the oldest rows, so pruning never holds many locks or stalls deliveries;
 * the call stops after `maxBatches` and reports `caughtUp: false` if more remain. Retention rule: keep ids longer
 * than the producer can still (re)send them — its retry horizon (≈ 27.6 h by default) + its dead-letter
 * retention + any replay window. Under `'monotonic'`/`'strict'` the cursor still stops a very late duplicate
 * whose id was pruned (it is at or below the cursor, so `stale_ignored`); under `'off'` retention is the only guard.
 *
 * @example
 * ```ts
 * import { pruneProcessed } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
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
  const retentionMs = parseRetentionMs(options.retention)
  const batchSize = positiveInteger(options.batchSize, 'batchSize', DEFAULT_PRUNE_BATCH_SIZE)
  const maxBatches = positiveInteger(options.maxBatches, 'maxBatches', DEFAULT_PRUNE_MAX_BATCHES)
  const pauseMs = positiveInteger(options.pauseMs, 'pauseMs', 0, true)
  const schema = checkSchema(options.schema, 'pruneProcessed')
  const logger = options.logger ?? DEFAULT_LOGGER
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
    if (batch > 0 && pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
    const deleted = await deleteProcessedBatch(own, retentionMs, batchSize)
    removed += deleted
    if (deleted < batchSize) return { removed, caughtUp: true }
  }
  return { removed, caughtUp: false }
}
