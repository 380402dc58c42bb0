import type { Kysely } from 'kysely'
import { invalidOption } from './errors.js'
import { decodeCursor, encodeCursor, pageLimit } from './keyset-cursor.js'
import { resolveSchema } from './schema-name.js'
import type { AttemptOutcome } from './sql/delivery-attempt-log.js'
import { type DeliveryAttemptFilter, selectDeliveryAttempts } from './sql/select-delivery-attempts.js'
import { uuidOption } from './uuid-option.js'

/** One attempt to deliver one event to one subscription, as the delivery log keeps it. */
export interface DeliveryAttempt {
  readonly subscriptionId: string
  readonly eventId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  /** When the request started (the relay's clock). */
  readonly attemptedAt: Date
  /** From the request's start to its outcome; null for an attempt charged when a relay took a lane over. */
  readonly durationMs: number | null
  /** The answer's status; null when no answer came (timeout, network error, refused address, takeover). */
  readonly httpStatus: number | null
  /**
   * `delivered` (2xx), `failed` (retried later), `conflict` (409: the lane parked, not an attempt against the
   * event's budget) or `dead` (the attempt after which the event was dead-lettered).
   */
  readonly outcome: AttemptOutcome
  /** The answer body's first 500 characters; null when no answer came. */
  readonly answer: string | null
  /** Why no answer came; null when one did. */
  readonly error: string | null
  /** Pass to `after` to get the next (older) page. */
  readonly cursor: string
}

/** Options of {@link listDeliveryAttempts}: every filter given must hold. */
export interface ListDeliveryAttemptsOptions {
  /** Only this subscription's attempts (its id; the relay's `endpoint` is `IMPLICIT_SUBSCRIPTION_ID`). */
  readonly subscriptionId?: string
  /** Only this event's attempts. */
  readonly eventId?: string
  /** Only this aggregate type's attempts (with `aggregateId`). */
  readonly aggregateType?: string
  /** Only this aggregate's attempts (with `aggregateType`). */
  readonly aggregateId?: string
  /** Page size. @defaultValue 100 */
  readonly limit?: number
  /** The `cursor` of the last attempt of the previous page. */
  readonly after?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

function aggregateOf(options: ListDeliveryAttemptsOptions): DeliveryAttemptFilter['aggregate'] {
  const { aggregateType: type, aggregateId: id } = options
  if (type === undefined && id === undefined) return undefined
  if (typeof type !== 'string' || typeof id !== 'string') {
    const missing = typeof type !== 'string' ? 'aggregateType' : 'aggregateId'
    throw invalidOption(
      missing,
      options[missing],
      (spell) =>
        `give ${spell('aggregateType')} and ${spell('aggregateId')} together (an aggregate is the pair)`,
    )
  }
  return { type, id }
}

/**
 * Lists the delivery log, newest first: each attempt the relay made for one subscription — when, how long, the
 * HTTP status, the start of the answer or the error — what to open first when a subscriber says it never got an
 * event. Attempts are recorded as the relay's `deliveryLog` option says, and kept until `prune` is given a
 * `deliveryLogRetention`. Two subscriptions of one event have two separate histories.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listDeliveryAttempts } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const page = await listDeliveryAttempts(db, { aggregateType: 'order', aggregateId: '42', limit: 20 })
 * for (const attempt of page) console.log(attempt.attemptedAt, attempt.outcome, attempt.httpStatus, attempt.answer)
 * const older = await listDeliveryAttempts(db, { aggregateType: 'order', aggregateId: '42', after: page.at(-1)?.cursor })
 * ```
 */
export async function listDeliveryAttempts(
  db: Kysely<any>,
  options: ListDeliveryAttemptsOptions = {},
): Promise<DeliveryAttempt[]> {
  const limit = pageLimit(options.limit)
  const filter: DeliveryAttemptFilter = {
    subscriptionId: uuidOption('subscriptionId', options.subscriptionId, "a subscription's id"),
    eventId: uuidOption('eventId', options.eventId, "an event's id"),
    aggregate: aggregateOf(options),
  }
  const rows = await selectDeliveryAttempts(
    { db, schema: resolveSchema(options.schema) },
    { filter, limit, after: afterCursor(options.after) },
  )
  return rows.map((row) => ({
    subscriptionId: row.subscription_id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    attemptedAt: row.attempted_at,
    durationMs: row.duration_ms,
    httpStatus: row.http_status,
    outcome: row.outcome,
    answer: row.answer,
    error: row.error,
    cursor: encodeCursor(row.attempted_at_cursor, row.id),
  }))
}

/** The `after` option as the query takes it. */
function afterCursor(after: unknown): { attemptedAt: string; id: string } | undefined {
  const cursor = decodeCursor(after, 'delivery attempt')
  return cursor === undefined ? undefined : { attemptedAt: cursor.time, id: cursor.id }
}
