import { setTimeout as delay } from 'node:timers/promises'
import type { Kysely } from 'kysely'
import { actorOption } from './audit.js'
import { dropLapsedDeliveries } from './drop-lapsed-deliveries.js'
import { type Duration, parseDuration } from './duration.js'
import { invalidOption, OutboxError } from './errors.js'
import { consoleLogger, isLogger, type Logger } from './logger.js'
import { disabledRetentionOption } from './paused-subscription.js'
import { resolveSchema } from './schema-name.js'
import { deleteDeliveryAttempts, hasExpiredDeliveryAttempts } from './sql/delete-delivery-attempts.js'
import { deleteExpired, hasExpired } from './sql/delete-expired.js'

/** Options of {@link prune}. */
export interface PruneOptions {
  /** Keep sent events at least this long (ms or `'30d'`). */
  readonly retention: Duration
  /** Also delete dead letters older than this; dead letters are kept when omitted. */
  readonly deadLetterRetention?: Duration
  /**
   * Also delete delivery log rows (`listDeliveryAttempts`) older than this; the log is kept, and grows, when
   * omitted.
   */
  readonly deliveryLogRetention?: Duration
  /**
   * Opt in to dropping the pending deliveries a DISABLED stored subscription has held longer than this while
   * disabled (a row qualifies when both its enqueue and the subscription's disabling are older than this; each lane
   * loses a prefix, so it keeps a contiguous tail). Dropped deliveries are counted per subscription (`dropped` in
   * `stats` and `listSubscriptions`) and recorded in the audit log (`listAudit`). Omitted or `false`, they are kept
   * until the subscription is enabled or deleted: a single `410 Gone` from a customer's endpoint disables a
   * subscription, so nothing it holds is dropped unless the operator asked.
   * @defaultValue false (keep them)
   */
  readonly disabledRetention?: Duration | false
  /** Who runs the prune, as the audit log records a drop of the disabled retention. @defaultValue 'api' */
  readonly actor?: string
  /** Rows per delete statement. @defaultValue 5000 */
  readonly batchSize?: number
  /** Stop after this many batches per status, so one run is bounded. @defaultValue 200 */
  readonly maxBatches?: number
  /** Pause between batches, to leave the database room for live traffic. @defaultValue 0 */
  readonly pauseMs?: number
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** Called after every batch, for progress output. */
  readonly onBatch?: (progress: { readonly status: PrunePass; readonly removed: number }) => void
  /** Stops between batches when aborted. */
  readonly signal?: AbortSignal
  /** Where the drops of the disabled retention are reported (one warning per subscription that lost deliveries). */
  readonly logger?: Logger
}

/**
 * What one pass of {@link prune} deletes: sent events, dead letters, delivery log rows, or the pending deliveries
 * disabled subscriptions held past the disabled retention.
 */
export type PrunePass = 'sent' | 'dead' | 'delivery-log' | 'disabled'

/** What {@link prune} did. */
export interface PruneResult {
  /** Rows deleted (sent, dead and delivery log). */
  readonly removed: number
  /**
   * Pending deliveries of disabled subscriptions dropped past the disabled retention: never delivered, counted apart
   * from `removed` (and per subscription, as `dropped` in `stats`).
   */
  readonly dropped: number
  /** True when nothing past retention is left; false when `maxBatches` (or the signal) stopped it first. */
  readonly caughtUp: boolean
}

/** Default rows per {@link prune} batch (the consumer's `pruneProcessed` deletes 1000 per batch). */
export const DEFAULT_OUTBOX_PRUNE_BATCH_SIZE = 5000
/** Default batch budget of one {@link prune} run (the consumer's `pruneProcessed` has 100). */
export const DEFAULT_OUTBOX_PRUNE_MAX_BATCHES = 200
/** @deprecated Use {@link DEFAULT_OUTBOX_PRUNE_BATCH_SIZE} (the consumer's constant of this name is 1000). */
export const DEFAULT_PRUNE_BATCH_SIZE = DEFAULT_OUTBOX_PRUNE_BATCH_SIZE
/** @deprecated Use {@link DEFAULT_OUTBOX_PRUNE_MAX_BATCHES} (the consumer's constant of this name is 100). */
export const DEFAULT_PRUNE_MAX_BATCHES = DEFAULT_OUTBOX_PRUNE_MAX_BATCHES

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  const resolved = value ?? fallback
  if (!Number.isSafeInteger(resolved) || resolved <= 0) {
    throw invalidOption(name, value, (spell, got) => `${spell(name)} must be a positive integer, got ${got}`)
  }
  return resolved
}

/**
 * Deletes sent events past retention in bounded batches (and dead letters and delivery log rows past their own
 * retentions, if given). Pending events are never touched, nor are sequence counters and lane rows, so pruning never
 * loses an event a subscription waits for and never reuses a sequence — with one exception the operator must ask
 * for: given a `disabledRetention`, it drops the pending deliveries a disabled stored subscription has held longer
 * than that. A drop takes a prefix of each lane
 * (the lane keeps a contiguous tail, delivered in order once the subscription is enabled), under the lane's locks as
 * operator actions take them (a lane an enqueue, a claim or a redrive holds, or a live lease, is left for a later
 * run), re-checks in its own statement that the subscription is still disabled (an enable in flight wins), and is
 * counted on the subscription, recorded in the audit log (`subscription.drop-pending`, under `actor`) and logged as
 * a warning. Run it from cron; `caughtUp: false` means run it again (or
 * raise `maxBatches`).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { prune } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { removed, dropped, caughtUp } = await prune(db, {
 *   retention: '30d',
 *   deliveryLogRetention: '7d',
 *   disabledRetention: '14d', // opt in: drop what a subscription held disabled for over 14 days
 *   actor: 'nightly-prune',
 *   batchSize: 5000,
 *   pauseMs: 50,
 * })
 * ```
 */
export async function prune(db: Kysely<any>, options: PruneOptions): Promise<PruneResult> {
  if (typeof options !== 'object' || options === null || options.retention === undefined) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      "prune needs { retention }, e.g. prune(db, { retention: '30d' })",
      { option: 'retention' },
    )
  }
  const schema = resolveSchema(options.schema)
  const retentionMs = parseDuration(options.retention, 'retention')
  const deadMs =
    options.deadLetterRetention === undefined
      ? undefined
      : parseDuration(options.deadLetterRetention, 'deadLetterRetention')
  const logMs =
    options.deliveryLogRetention === undefined
      ? undefined
      : parseDuration(options.deliveryLogRetention, 'deliveryLogRetention')
  const batchSize = positiveInteger(options.batchSize, DEFAULT_OUTBOX_PRUNE_BATCH_SIZE, 'batchSize')
  const maxBatches = positiveInteger(options.maxBatches, DEFAULT_OUTBOX_PRUNE_MAX_BATCHES, 'maxBatches')
  const pauseMs = parseDuration(options.pauseMs ?? 0, 'pauseMs')
  const disabledMs = disabledRetentionOption(options.disabledRetention)
  const actor = actorOption(options.actor)
  if (options.logger !== undefined && !isLogger(options.logger)) {
    throw invalidOption(
      'logger',
      options.logger,
      (spell) => `${spell('logger')} must have debug, info, warn and error methods (pino's order)`,
    )
  }
  const logger = options.logger ?? consoleLogger

  const sqlContext = { db, schema }
  let removed = 0
  let caughtUp = true
  const passes: [Exclude<PrunePass, 'disabled'>, number][] = [['sent', retentionMs]]
  if (deadMs !== undefined) passes.push(['dead', deadMs])
  if (logMs !== undefined) passes.push(['delivery-log', logMs])
  for (const [status, keepMs] of passes) {
    let batches = 0
    for (;;) {
      if (options.signal?.aborted) return { removed, dropped: 0, caughtUp: false }
      const deleted =
        status === 'delivery-log'
          ? await deleteDeliveryAttempts(sqlContext, { olderThanMs: keepMs, limit: batchSize })
          : await deleteExpired(sqlContext, { status, olderThanMs: keepMs, limit: batchSize })
      removed += deleted
      batches += 1
      options.onBatch?.({ status, removed: deleted })
      if (deleted < batchSize) break
      if (batches >= maxBatches) {
        // The budget ran out on a full batch: it finished only if nothing past retention is left.
        const left =
          status === 'delivery-log'
            ? await hasExpiredDeliveryAttempts(sqlContext, { olderThanMs: keepMs })
            : await hasExpired(sqlContext, { status, olderThanMs: keepMs })
        if (left) caughtUp = false
        break
      }
      if (pauseMs > 0) await pause(pauseMs, options.signal)
    }
  }
  if (disabledMs === false) return { removed, dropped: 0, caughtUp }
  const held = await dropLapsedDeliveries({
    db,
    schema,
    retentionMs: disabledMs,
    batchSize,
    maxBatches,
    pauseMs,
    signal: options.signal,
    logger,
    actor,
    onBatch: (dropped) => options.onBatch?.({ status: 'disabled', removed: dropped }),
  })
  return { removed, dropped: held.dropped, caughtUp: caughtUp && held.caughtUp }
}

/** Waits `ms`, or less if `signal` aborts, so Ctrl-C does not wait out a long pause. */
async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  // An abort ends the wait early; the caller sees `signal.aborted` and stops, so the rejection is not an error.
  await delay(ms, undefined, { signal }).catch(() => {})
}
