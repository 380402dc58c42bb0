import { type RawBuilder, sql } from 'kysely'

/** What became of one attempt, as the delivery log records it. */
export type AttemptOutcome = 'delivered' | 'failed' | 'conflict' | 'dead'

/** One attempt for the delivery log: what the lane worker knows when the answer (or its absence) is in. */
export interface AttemptRecord {
  readonly subscriptionId: string
  readonly eventId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  readonly attemptedAt: Date
  /** From the request's start to its outcome; null when unknown (an attempt charged at a takeover). */
  readonly durationMs: number | null
  readonly httpStatus: number | null
  /** The answer body's first characters (see `MAX_ANSWER_EXCERPT`); null when no answer came. */
  readonly answer: string | null
  /** Why no answer came (timeout, network, refused address); null when one did. */
  readonly error: string | null
}

/**
 * A data-modifying CTE, `attempt_log`, that records one failed, parked or dead-lettering attempt: added to the
 * failure statement that settles it (schedule-retry, park-lane, dead-letter-head), so the log costs no round trip.
 * Placed after the statement's `released` CTE. `fenced`: record it only when the statement still owned the lane
 * (an attempt a takeover charges is bookkeeping, not a request, so it exists only if the charge was made); a request
 * that was made is recorded whoever owns the lane now, since the endpoint saw it. Empty when `record` is undefined
 * (the relay logs no failures), so those statements cost nothing more.
 */
export function attemptLogCte(
  schema: string,
  record: AttemptRecord | undefined,
  outcome: Exclude<AttemptOutcome, 'delivered'>,
  fenced = false,
): RawBuilder<unknown> {
  if (record === undefined) return sql``
  return sql`, attempt_log AS (
      INSERT INTO ${sql.id(schema, 'outbox_delivery_attempt')} (subscription_id, event_id, aggregate_type,
        aggregate_id, sequence, attempted_at, duration_ms, http_status, outcome, answer, error)
      SELECT ${record.subscriptionId}::uuid, ${record.eventId}::uuid, ${record.aggregateType}, ${record.aggregateId},
        ${record.sequence}::bigint, ${record.attemptedAt}::timestamptz, ${record.durationMs}::int,
        ${record.httpStatus}::int, ${outcome}, ${record.answer}::text, ${record.error}::text
      WHERE ${!fenced} OR EXISTS (SELECT 1 FROM released)
    )`
}

/**
 * A data-modifying CTE, `delivered_log`, that records a batch of 2xx attempts: added to the mark flush, one
 * `INSERT … SELECT FROM unnest` for the whole batch, so the log adds no statement and no round trip per delivery.
 * Every 2xx is recorded, fenced or not: the subscriber got it. Empty when no mark of the batch is logged.
 */
export function deliveredLogCte(schema: string, records: readonly AttemptRecord[]): RawBuilder<unknown> {
  if (records.length === 0) return sql``
  const column = <T>(read: (record: AttemptRecord) => T) => records.map(read)
  return sql`, delivered_log AS (
      INSERT INTO ${sql.id(schema, 'outbox_delivery_attempt')} (subscription_id, event_id, aggregate_type,
        aggregate_id, sequence, attempted_at, duration_ms, http_status, outcome, answer)
      SELECT d.subscription_id, d.event_id, d.aggregate_type, d.aggregate_id, d.sequence, d.attempted_at,
        d.duration_ms, d.http_status, 'delivered', d.answer
      FROM unnest(
        ${column((r) => r.subscriptionId)}::uuid[], ${column((r) => r.eventId)}::uuid[],
        ${column((r) => r.aggregateType)}::text[], ${column((r) => r.aggregateId)}::text[],
        ${column((r) => r.sequence)}::bigint[], ${column((r) => r.attemptedAt.toISOString())}::timestamptz[],
        ${column((r) => r.durationMs)}::int[], ${column((r) => r.httpStatus)}::int[],
        ${column((r) => r.answer)}::text[]
      ) AS d(subscription_id, event_id, aggregate_type, aggregate_id, sequence, attempted_at, duration_ms,
             http_status, answer)
    )`
}
