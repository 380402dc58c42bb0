import type { Kysely } from 'kysely'
import { invalidOption } from './errors.js'
import { resolveSchema } from './schema-name.js'
import { selectThroughput } from './sql/select-throughput.js'
import { subscriptionIdOption } from './uuid-option.js'

/** Options of {@link throughput}. */
export interface ThroughputOptions {
  /** How far back to count, in milliseconds. @defaultValue 3_600_000 (an hour) */
  readonly windowMs?: number
  /** The width of one bucket, in milliseconds. @defaultValue 60_000 (a minute) */
  readonly bucketMs?: number
  /** Only this subscription's deliveries (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/** One bucket of {@link throughput}: the deliveries marked sent from `at` to `at` + the bucket width. */
export interface ThroughputBucket {
  /** The bucket's start. */
  readonly at: Date
  /** Deliveries marked sent in it (one per subscription an event went to). */
  readonly sent: number
}

/** The most buckets one call returns: a chart of a day by the minute, and a guard against a typo in `bucketMs`. */
export const MAX_THROUGHPUT_BUCKETS = 1440

function positiveMs(value: number | undefined, fallback: number, option: string): number {
  if (value === undefined) return fallback
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw invalidOption(
      option,
      value,
      (name, got) => `${name(option)} must be a positive number of milliseconds, got ${got}`,
    )
  }
  return value
}

/**
 * Counts deliveries per time bucket from the retained sent rows' `sent_at`, oldest bucket first and the current,
 * partial one last; a bucket nothing was sent in counts 0. The buckets are aligned on the epoch and cut by the
 * database's clock, so every process asking at once gets the same answer. Rows already pruned are not counted:
 * keep `prune`'s retention longer than the window for a complete chart.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { throughput } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const { at, sent } of await throughput(db, { windowMs: 15 * 60_000, bucketMs: 60_000 })) {
 *   console.log(at.toISOString(), sent)
 * }
 * ```
 */
export async function throughput(
  db: Kysely<any>,
  options: ThroughputOptions = {},
): Promise<ThroughputBucket[]> {
  const windowMs = positiveMs(options.windowMs, 3_600_000, 'windowMs')
  const bucketMs = positiveMs(options.bucketMs, 60_000, 'bucketMs')
  const buckets = Math.ceil(windowMs / bucketMs)
  if (buckets > MAX_THROUGHPUT_BUCKETS) {
    throw invalidOption(
      'bucketMs',
      bucketMs,
      (name, got) =>
        `${name('windowMs')} / ${name('bucketMs')} gives ${buckets} buckets, more than ${MAX_THROUGHPUT_BUCKETS}; widen ${name('bucketMs')} (got ${got})`,
    )
  }
  const { subscriptionId } = options
  subscriptionIdOption(subscriptionId)
  const rows = await selectThroughput(
    { db, schema: resolveSchema(options.schema) },
    { bucketMs, buckets, subscriptionId },
  )
  return rows.map((row) => ({ at: new Date(Number(row.bucket) * bucketMs), sent: Number(row.sent) }))
}
