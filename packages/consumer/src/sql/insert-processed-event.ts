import type { ReceivedEvent } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/**
 * Records an event id under the consumer's `source`; returns false when that source already recorded it.
 *
 * Why `INSERT … ON CONFLICT DO NOTHING` and not "SELECT, then INSERT": a concurrent delivery of the same id
 * blocks on the primary-key index entry until the first transaction ends. If that one commits, the waiter's
 * insert becomes a no-op (0 rows → `duplicate_ignored`); if it rolls back (the handler threw), the waiter's insert
 * succeeds and it applies the event instead. Either way exactly one transaction applies — a SELECT-first check
 * would let both see "absent". The key is `(source, event_id)` (migration 0003): another source's row with the same
 * id is not a conflict. An event without an aggregate or a sequence (another sender's) is recorded with NULLs.
 * Used under `sequence: 'off'` only: with a cursor, the same insert is the first step of the one statement in
 * record-event.ts, which also takes the cursor.
 *
 * @param event `eventId` is the id as recorded (see `createApplyEvent`).
 */
export async function insertProcessedEvent(
  db: Kysely<ConsumerDatabase>,
  source: string,
  event: ReceivedEvent<unknown>,
): Promise<boolean> {
  const result = await db
    .insertInto('processed_events')
    .values({
      source,
      event_id: event.eventId,
      aggregate_type: event.aggregateType ?? null,
      aggregate_id: event.aggregateId ?? null,
      sequence: event.sequence ?? null,
      type: event.type,
    })
    .onConflict((conflict) => conflict.columns(['source', 'event_id']).doNothing())
    .executeTakeFirst()
  return (result.numInsertedOrUpdatedRows ?? 0n) > 0n
}
