import { sql, type Transaction } from 'kysely'
import type { ValidatedEvent } from '../event-input.js'

/** What an enqueue returns for each event. */
export interface EnqueuedEvent {
  readonly eventId: string
  readonly sequence: number
}

/**
 * Enqueues one event in ONE round trip: bump the aggregate's counter, insert the event with that sequence, make
 * sure its lane row exists, and NOTIFY.
 *
 * Why a counter row and not `MAX(sequence) + 1`: the upsert's row lock makes writers of one aggregate wait for each
 * other until commit, so sequence order is commit order, a rollback leaves no gap, and concurrent writers never
 * hit a unique violation at READ COMMITTED. The lane insert is `ON CONFLICT DO NOTHING`, which takes no lock on an
 * existing lane row, so enqueues never wait on a relay that holds the lane.
 */
export async function insertEvent(
  trx: Transaction<any>,
  schema: string,
  event: ValidatedEvent,
  eventId: string,
  channel: string | null,
): Promise<EnqueuedEvent> {
  const counter = sql.id(schema, 'outbox_counter')
  const outbox = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  const notify = channel === null ? sql`` : sql`, pg_notify(${channel}, '')`
  const { rows } = await sql<{ sequence: string }>`
    WITH counter AS (
      INSERT INTO ${counter} AS c (aggregate_type, aggregate_id, last_sequence)
      VALUES (${event.aggregateType}, ${event.aggregateId}, 1)
      ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + 1
      RETURNING last_sequence
    ), lane AS (
      INSERT INTO ${lane} (aggregate_type, aggregate_id)
      VALUES (${event.aggregateType}, ${event.aggregateId})
      ON CONFLICT DO NOTHING
    ), inserted AS (
      INSERT INTO ${outbox} (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, available_at)
      SELECT ${eventId}, ${event.aggregateType}, ${event.aggregateId}, counter.last_sequence, ${event.eventType}, ${event.payloadJson}::jsonb,
        -- Join the lane's due time: behind a head in backoff (or a parked lane) the new row must not look due.
        CASE WHEN EXISTS (
          SELECT 1 FROM ${lane} b
          WHERE b.aggregate_type = ${event.aggregateType} AND b.aggregate_id = ${event.aggregateId}
            AND b.blocked_reason = 'exhausted'
        ) THEN 'infinity'::timestamptz ELSE greatest(now(), coalesce((
          SELECT p.available_at FROM ${outbox} p
          WHERE p.aggregate_type = ${event.aggregateType} AND p.aggregate_id = ${event.aggregateId} AND p.status = 'pending'
          ORDER BY p.sequence DESC LIMIT 1
        ), now())) END
      FROM counter
      RETURNING sequence
    )
    SELECT sequence${notify} FROM inserted`.execute(trx)
  return { eventId, sequence: Number(rows[0]!.sequence) }
}
