import { sql, type Transaction } from 'kysely'
import type { ValidatedEvent } from '../event-input.js'

/** What an enqueue returns for each event. */
export interface EnqueuedEvent {
  readonly eventId: string
  readonly sequence: number
}

/**
 * Enqueues one event in ONE round trip, through the schema's `outbox_enqueue` function (migration 0003): bump the
 * aggregate's counter, make sure its lane row exists, insert the event with the lane's due time, and NOTIFY.
 *
 * Why a counter row and not `MAX(sequence) + 1`: the upsert's row lock makes writers of one aggregate wait for each
 * other until commit, so sequence order is commit order, a rollback leaves no gap, and concurrent writers never
 * hit a unique violation at READ COMMITTED. The lane insert is `ON CONFLICT DO NOTHING`, which takes no lock on an
 * existing lane row, so enqueues never wait on a relay that holds the lane. Why a function: PL/pgSQL keeps the
 * plans of its statements for the connection's life, where the same statements sent as one CTE were planned on
 * every call (≈ 0.3 ms, half of what enqueue cost).
 */
export async function insertEvent(
  trx: Transaction<any>,
  schema: string,
  event: ValidatedEvent,
  eventId: string,
  channel: string | null,
): Promise<EnqueuedEvent> {
  const { rows } = await sql<{ sequence: string }>`
    SELECT ${sql.id(schema, 'outbox_enqueue')}(
      ${eventId}, ${event.aggregateType}, ${event.aggregateId}, ${event.eventType}, ${event.payloadJson}::jsonb, ${channel}
    ) AS sequence`.execute(trx)
  return { eventId, sequence: Number(rows[0]!.sequence) }
}
