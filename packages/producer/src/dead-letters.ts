import type { Kysely } from 'kysely'
import { invalidOption, OutboxError } from './errors.js'
import { decodeCursor, encodeCursor } from './keyset-cursor.js'
import { resolveSchema } from './schema-name.js'
import { redriveDead } from './sql/redrive-dead.js'
import { selectDeadLetters } from './sql/select-dead-letters.js'

/**
 * A dead-lettered event: delivery to one subscription gave up on it, it is kept for inspection and redrive. An event
 * dead in two subscriptions is two dead letters (same `eventId`, different `subscriptionId` and `cursor`).
 */
export interface DeadLetter {
  readonly eventId: string
  /** The subscription whose delivery gave up: the nil uuid for the implicit subscription (the relay's `endpoint`). */
  readonly subscriptionId: string
  /**
   * The subscription's name (`default` for the implicit one); null for a stored subscription without a name, or one
   * deleted while its dead letters were left.
   */
  readonly subscriptionName: string | null
  /** The tenant the event was enqueued for; null when it was enqueued without one. */
  readonly tenant: string | null
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
  /** Only this subscription's dead letters (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/**
 * Lists dead letters, oldest first, with their subscription and their last status and error; all of them, or one
 * subscription's. Pages stay stable while new dead letters arrive.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listDeadLetters } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const dead of await listDeadLetters(db, { limit: 20 })) {
 *   console.log(dead.subscriptionName, dead.eventId, dead.lastStatus, dead.lastError)
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
  const subscriptionId = subscriptionIdOption(options.subscriptionId)
  const rows = await selectDeadLetters(
    { db, schema: resolveSchema(options.schema) },
    { limit, after: afterCursor(options.after), subscriptionId },
  )
  return rows.map((row) => ({
    eventId: row.event_id,
    subscriptionId: row.subscription_id,
    subscriptionName: row.subscription_name,
    tenant: row.tenant,
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
    cursor: encodeCursor(row.dead_at_cursor, row.id),
  }))
}

/** Checks an optional `subscriptionId` option: a subscription's id is a UUID. */
function subscriptionIdOption(id: string | undefined): string | undefined {
  if (id === undefined) return undefined
  if (typeof id !== 'string' || !UUID.test(id)) {
    throw invalidOption(
      'subscriptionId',
      id,
      (name, got) => `${name('subscriptionId')} must be a subscription's id (a UUID), got ${got}`,
    )
  }
  return id.toLowerCase()
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
  subscriptionId: string | undefined,
): Promise<RedrivenDelivery[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db
        .transaction()
        .execute((trx) => redriveDead({ db: trx, schema }, { eventIds: ids, subscriptionId }))
    } catch (error) {
      if ((error as { code?: unknown }).code !== '40P01' || attempt > DEADLOCK_RETRIES) throw error
    }
  }
}

/**
 * Which dead letters {@link redrive} revives: the given event ids, or all of them; in every subscription where they
 * are dead, or in the one `subscriptionId` names.
 */
export type RedriveOptions = ({ readonly eventIds: readonly string[] } | { readonly all: true }) & {
  /** Only this subscription's dead letters (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  readonly schema?: string
}

/** One dead letter {@link redrive} revived: an event's delivery to one subscription. */
export interface RedrivenDelivery {
  readonly eventId: string
  readonly subscriptionId: string
}

/** What {@link redrive} did. */
export interface RedriveResult {
  /** Event ids now pending again (in at least one subscription), each once. */
  readonly redriven: readonly string[]
  /**
   * Requested ids that were not dead letters (unknown, already pending or sent) — in the subscription given, when
   * one was.
   */
  readonly notDead: readonly string[]
  /** Each revived dead letter with its subscription: an event dead in two subscriptions is listed twice. */
  readonly deliveries: readonly RedrivenDelivery[]
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * Sends dead letters again: each goes back to pending with the SAME event id and sequence and its attempts reset.
 * An event id is redriven in every subscription where it is dead, unless `subscriptionId` names one; another
 * subscription's delivery of the same event is then left as it is.
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
 * // Every dead letter of one subscription:
 * await redrive(db, { all: true, subscriptionId: '5d1c3b0e-8f7a-4e2b-9c61-2a4f0d9e7b13' })
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
  const subscriptionId = subscriptionIdOption(options.subscriptionId)
  const deliveries = await redriveRetryingDeadlocks(db, schema, ids, subscriptionId)
  const redriven = [...new Set(deliveries.map((delivery) => delivery.eventId))]
  const revived = new Set(redriven)
  return {
    redriven,
    notDead: ids === 'all' ? [] : ids.filter((id) => !revived.has(id)),
    deliveries,
  }
}

/** The `after` option as the query takes it. */
function afterCursor(after: unknown): { deadAt: string; id: string } | undefined {
  const cursor = decodeCursor(after, 'dead letter')
  return cursor === undefined ? undefined : { deadAt: cursor.time, id: cursor.id }
}
