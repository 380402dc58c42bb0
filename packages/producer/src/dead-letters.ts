import { isUuid } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import { actorOption, recordAudit } from './audit.js'
import {
  type DeadLetterFilter,
  deadLetterFilterOption,
  filterForAudit,
  type ResolvedDeadLetterFilter,
} from './dead-letter-filter.js'
import { invalidOption, OutboxError } from './errors.js'
import { decodeCursor, encodeCursor, pageLimit } from './keyset-cursor.js'
import { inTransactionRetryingDeadlocks } from './retry-deadlocks.js'
import { resolveSchema } from './schema-name.js'
import { type DeadLetterSelection, redriveDead, selectRedrivable } from './sql/redrive-dead.js'
import { selectDeadLetter } from './sql/select-dead-letter.js'
import { type DeadLetterRow, selectDeadLetters } from './sql/select-dead-letters.js'
import { subscriptionIdOption, uuidOption } from './uuid-option.js'

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
  /**
   * Whether it is its lane's BLOCKER: the lane is blocked by `onExhausted: 'block'` and this is the lane's dead
   * letter with the highest sequence. Redriving it resumes the lane; discarding it needs `unblockLanes`.
   */
  readonly blocksLane: boolean
  /** Pass to `after` to get the next page. */
  readonly cursor: string
}

/** One dead letter in full: {@link DeadLetter} with its payload and what the subscriber last answered. */
export interface DeadLetterDetail extends DeadLetter {
  /** The event's payload as enqueued. */
  readonly payload: unknown
  /**
   * The newest answer body the delivery log holds for this event and subscription (its first 500 characters, as the
   * subscriber wrote it: show it escaped); null when none was logged (no answer came, or the log is off).
   */
  readonly lastAnswer: string | null
}

/** Options of {@link listDeadLetters}: a page, narrowed by any {@link DeadLetterFilter} field. */
export interface ListDeadLettersOptions extends DeadLetterFilter {
  /** Page size. @defaultValue 100 */
  readonly limit?: number
  /** The `cursor` of the last dead letter of the previous page. */
  readonly after?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/**
 * Lists dead letters, oldest first, with their subscription, their last status and error, and whether each blocks
 * its lane; all of them, or those a filter picks (subscription, tenant, event type or `'order.*'`, aggregate, last
 * HTTP status, death time). Pages stay stable while new dead letters arrive; pass the same filter with `after`.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listDeadLetters } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const dead of await listDeadLetters(db, { limit: 20 })) {
 *   console.log(dead.subscriptionName, dead.eventId, dead.lastStatus, dead.lastError)
 * }
 * // Yesterday's 410s of order events:
 * await listDeadLetters(db, { eventType: 'order.*', status: 410, since: new Date(Date.now() - 86_400_000) })
 * ```
 */
export async function listDeadLetters(
  db: Kysely<any>,
  options: ListDeadLettersOptions = {},
): Promise<DeadLetter[]> {
  const limit = pageLimit(options.limit)
  const { limit: _limit, after, schema, ...filter } = options
  const rows = await selectDeadLetters(
    { db, schema: resolveSchema(schema) },
    { limit, after: afterCursor(after), filter: deadLetterFilterOption(filter) },
  )
  return rows.map(deadLetterOf)
}

function deadLetterOf(row: DeadLetterRow): DeadLetter {
  return {
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
    blocksLane: row.blocks_lane === true,
    cursor: encodeCursor(row.dead_at_cursor, row.id),
  }
}

/** Options of {@link getDeadLetter}. */
export interface GetDeadLetterOptions {
  readonly eventId: string
  /**
   * The subscription whose dead letter to show (its id). @defaultValue the event's first dead letter (oldest
   * death) among the subscriptions where it is dead
   */
  readonly subscriptionId?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/**
 * One dead letter in full: what {@link listDeadLetters} shows, plus its payload and the newest answer body the
 * delivery log holds for it; undefined when the event is not dead (in that subscription).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { getDeadLetter } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const dead = await getDeadLetter(db, { eventId: '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a' })
 * if (dead) console.log(dead.lastStatus, dead.lastAnswer, dead.payload)
 * ```
 */
export async function getDeadLetter(
  db: Kysely<any>,
  options: GetDeadLetterOptions,
): Promise<DeadLetterDetail | undefined> {
  const eventId = uuidOption('eventId', options?.eventId, "an event's id")
  if (eventId === undefined) {
    throw invalidOption(
      'eventId',
      undefined,
      (name) => `${name('eventId')} is required (an event's id, a UUID)`,
    )
  }
  const subscriptionId = subscriptionIdOption(options.subscriptionId)
  const row = await selectDeadLetter(
    { db, schema: resolveSchema(options.schema) },
    { eventId, subscriptionId },
  )
  if (!row) return undefined
  return { ...deadLetterOf(row), payload: row.payload, lastAnswer: row.last_answer }
}

/**
 * Which dead letters {@link redrive} revives: the given event ids, all of them, or those a filter picks; in every
 * subscription where they are dead, or in the one `subscriptionId` names.
 */
export type RedriveOptions = (
  | { readonly eventIds: readonly string[] }
  | { readonly all: true }
  | { readonly filter: DeadLetterFilter }
) & {
  /** Only this subscription's dead letters (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  /** Report what would be redriven, in the same shape, and change nothing. @defaultValue false */
  readonly dryRun?: boolean
  /** Who asks, as the audit log records it. @defaultValue 'api' */
  readonly actor?: string
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
  /** True when nothing was changed: the lists say what a real run would have redriven. */
  readonly dryRun: boolean
}

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
 * `dryRun: true` reports what would be redriven (same shape, `dryRun: true`) and changes nothing. A real redrive
 * records one `'dead-letters.redrive'` row in the audit log, in its own transaction (the ids, `all` or the filter as
 * target; the counts as result), so the row exists exactly when the redrive committed.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { redrive } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { redriven, notDead } = await redrive(db, { eventIds: ['0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a'] })
 * // Every dead letter of one subscription:
 * await redrive(db, { all: true, subscriptionId: '5d1c3b0e-8f7a-4e2b-9c61-2a4f0d9e7b13' })
 * // What a filter would take, then the real thing:
 * const preview = await redrive(db, { filter: { eventType: 'order.*', status: 503 }, dryRun: true })
 * if (preview.deliveries.length < 100) await redrive(db, { filter: { eventType: 'order.*', status: 503 }, actor: 'ops' })
 * ```
 */
export async function redrive(db: Kysely<any>, options: RedriveOptions): Promise<RedriveResult> {
  const schema = resolveSchema(options?.schema)
  const forms = options ? ['eventIds', 'all', 'filter'].filter((form) => form in options) : []
  if (forms.length > 1) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `redrive takes one of { eventIds }, { all: true } or { filter }, got ${forms.join(' and ')}`,
      { option: forms[1]! },
    )
  }
  let ids: readonly string[] | 'all'
  let filter: ResolvedDeadLetterFilter | undefined
  if (options && 'all' in options && options.all === true) {
    ids = 'all'
  } else if (options && 'eventIds' in options && Array.isArray(options.eventIds)) {
    ids = eventIdsOption(options.eventIds)
  } else if (options && 'filter' in options && options.filter !== undefined) {
    ids = 'all'
    filter = deadLetterFilterOption(options.filter)
  } else {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'redrive needs { eventIds: [...] }, { all: true } or { filter: {...} }',
      { option: 'eventIds' },
    )
  }
  const subscriptionId = subscriptionIdOption(options.subscriptionId)
  const actor = actorOption(options.actor)
  const dryRun = options.dryRun === true
  const selection: DeadLetterSelection = { eventIds: ids, subscriptionId, filter }
  const deliveries = dryRun
    ? await selectRedrivable({ db, schema }, selection)
    : await inTransactionRetryingDeadlocks(db, async (trx) => {
        const revived = await redriveDead({ db: trx, schema }, selection)
        const redriven = new Set(revived.map((one) => one.eventId))
        await recordAudit(
          { db: trx, schema },
          {
            actor,
            action: 'dead-letters.redrive',
            target: {
              ...(ids === 'all'
                ? filter
                  ? { filter: filterForAudit(filter) }
                  : { all: true }
                : { eventIds: ids }),
              ...(subscriptionId === undefined ? {} : { subscriptionId }),
            },
            result: {
              redriven: redriven.size,
              deliveries: revived.length,
              notDead: ids === 'all' ? 0 : ids.filter((id) => !redriven.has(id)).length,
            },
          },
        )
        return revived
      })
  const redriven = [...new Set(deliveries.map((delivery) => delivery.eventId))]
  const revived = new Set(redriven)
  return {
    redriven,
    notDead: ids === 'all' ? [] : ids.filter((id) => !revived.has(id)),
    deliveries,
    dryRun,
  }
}

/** Checks a list of event ids: each a UUID; returned lower case, each once. */
export function eventIdsOption(eventIds: readonly unknown[]): string[] {
  const bad = eventIds.filter((id) => !isUuid(id))
  if (bad.length > 0) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `event ids must be UUIDs; not one: ${bad.map((id) => JSON.stringify(id)).join(', ')}`,
      { option: 'eventIds' },
    )
  }
  return [...new Set((eventIds as string[]).map((id) => id.toLowerCase()))]
}

/** The `after` option as the query takes it. */
function afterCursor(after: unknown): { deadAt: string; id: string } | undefined {
  const cursor = decodeCursor(after, 'dead letter')
  return cursor === undefined ? undefined : { deadAt: cursor.time, id: cursor.id }
}
