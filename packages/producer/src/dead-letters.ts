import type { Kysely } from 'kysely'
import { invalidOption, OutboxError } from './errors.js'
import { resolveSchema } from './schema-name.js'
import { redriveDead } from './sql/redrive-dead.js'
import { selectDeadLetters } from './sql/select-dead-letters.js'

/** A dead-lettered event: delivery gave up on it, it is kept for inspection and redrive. */
export interface DeadLetter {
  readonly eventId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  readonly eventType: string
  readonly attempts: number
  /** HTTP status of the last attempt, or null for a timeout / network error / lost lease. */
  readonly lastStatus: number | null
  readonly lastError: string | null
  readonly lastAttemptAt: Date | null
  readonly createdAt: Date
  readonly deadAt: Date
  /** Pass to `after` to get the next page. */
  readonly cursor: string
}

/** Options of {@link listDeadLetters}. */
export interface ListDeadLettersOptions {
  /** Page size. @defaultValue 100 */
  readonly limit?: number
  /** The `cursor` of the last dead letter of the previous page. */
  readonly after?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/**
 * Lists dead letters, oldest first, with their last status and error.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listDeadLetters } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const dead of await listDeadLetters(db, { limit: 20 })) {
 *   console.log(dead.eventId, dead.lastStatus, dead.lastError)
 * }
 * ```
 */
export async function listDeadLetters(
  db: Kysely<any>,
  options: ListDeadLettersOptions = {},
): Promise<DeadLetter[]> {
  const limit = options.limit ?? 100
  if (!Number.isSafeInteger(limit) || limit <= 0) {
    throw invalidOption(
      'limit',
      options.limit,
      (name, got) => `${name('limit')} must be a positive integer, got ${got}`,
    )
  }
  const rows = await selectDeadLetters(
    { db, schema: resolveSchema(options.schema) },
    { limit, after: decodeCursor(options.after) },
  )
  return rows.map((row) => ({
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    eventType: row.event_type,
    attempts: row.attempts,
    lastStatus: row.last_status,
    lastError: row.last_error,
    lastAttemptAt: row.last_attempt_at,
    createdAt: row.created_at,
    deadAt: row.dead_at,
    cursor: `${row.dead_at_cursor}_${row.id}`,
  }))
}

// The cursor keeps dead_at to the microsecond (see select-dead-letters.ts), as text PostgreSQL reads back exactly.
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z)_(\d{1,19})$/

function decodeCursor(cursor: string | undefined): { deadAt: string; id: string } | undefined {
  if (cursor === undefined) return undefined
  const match = typeof cursor === 'string' ? CURSOR.exec(cursor) : null
  if (!match || Number.isNaN(Date.parse(match[1]!))) {
    throw invalidOption(
      'after',
      cursor,
      (name, got) => `${name('after')} must be the cursor of a listed dead letter, got ${got}`,
    )
  }
  return { deadAt: match[1]!, id: match[2]! }
}

/** How often a redrive chosen as a deadlock's victim starts again before it gives up. */
const DEADLOCK_RETRIES = 3

/**
 * Runs the redrive in a transaction of its own, again when PostgreSQL chose it as a deadlock's victim (40P01): it
 * locks counters in sorted order as `enqueueMany` does, but a transaction that enqueues for two aggregates one
 * `enqueue` at a time, in the opposite order, can still meet it — and the application's transaction should not be
 * the one that pays for an operator's redrive more than once.
 */
async function redriveRetryingDeadlocks(
  db: Kysely<any>,
  schema: string,
  ids: readonly string[] | 'all',
): Promise<string[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute((trx) => redriveDead({ db: trx, schema }, { eventIds: ids }))
    } catch (error) {
      if ((error as { code?: unknown }).code !== '40P01' || attempt > DEADLOCK_RETRIES) throw error
    }
  }
}

/** Which dead letters {@link redrive} revives: the given event ids, or all of them. */
export type RedriveOptions = ({ readonly eventIds: readonly string[] } | { readonly all: true }) & {
  readonly schema?: string
}

/** What {@link redrive} did. */
export interface RedriveResult {
  /** Event ids now pending again. */
  readonly redriven: readonly string[]
  /** Requested ids that were not dead letters (unknown, already pending or sent). */
  readonly notDead: readonly string[]
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * Sends dead letters again: each goes back to pending with the SAME event id and sequence and its attempts reset.
 *
 * It locks each affected aggregate's sequence counter (so no enqueue of it is open meanwhile) and lane (so no claim
 * of it runs meanwhile): it never puts two requests of one lane in flight, and never leaves an event enqueued
 * behind a block waiting at `'infinity'` after the block is lifted. A lane parked by `onExhausted: 'block'` resumes,
 * in order, when the dead letter that blocked it (its latest) is among those revived; an older dead letter revived
 * alone waits in the still-blocked lane. Under `'skip'` the lane may already have moved past the event: an ordered
 * consumer then answers `stale_ignored`, which the relay reports.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { redrive } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { redriven, notDead } = await redrive(db, { eventIds: ['0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a'] })
 * ```
 */
export async function redrive(db: Kysely<any>, options: RedriveOptions): Promise<RedriveResult> {
  const schema = resolveSchema(options?.schema)
  let ids: readonly string[] | 'all'
  if (options && 'all' in options && options.all === true) {
    ids = 'all'
  } else if (options && 'eventIds' in options && Array.isArray(options.eventIds)) {
    const bad = options.eventIds.filter((id) => typeof id !== 'string' || !UUID.test(id))
    if (bad.length > 0) {
      throw new OutboxError(
        'ERR_OUTBOX_INVALID_OPTION',
        `event ids must be UUIDs; not one: ${bad.map((id) => JSON.stringify(id)).join(', ')}`,
        { option: 'eventIds' },
      )
    }
    ids = options.eventIds.map((id) => id.toLowerCase())
  } else {
    throw new OutboxError('ERR_OUTBOX_INVALID_OPTION', 'redrive needs { eventIds: [...] } or { all: true }', {
      option: 'eventIds',
    })
  }
  const redriven = await redriveRetryingDeadlocks(db, schema, ids)
  const revived = new Set(redriven)
  return { redriven, notDead: ids === 'all' ? [] : ids.filter((id) => !revived.has(id)) }
}
