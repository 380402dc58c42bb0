import type { OutboxEvent } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/**
 * Records an event id; returns false when it was already recorded.
 *
 * Why `INSERT … ON CONFLICT DO NOTHING` and not "SELECT, then INSERT": a concurrent delivery of the same id
 * blocks on the primary-key index entry until the first transaction ends. If that one commits, the waiter's
 * insert becomes a no-op (0 rows → `duplicate_ignored`); if it rolls back (the handler threw), the waiter's insert
 * succeeds and it applies the event instead. Either way exactly one transaction applies — a SELECT-first check
 * would let both see "absent". Used under `sequence: 'off'` only: with a cursor, the same insert is the first
 * step of the one statement in record-event.ts, which also takes the cursor.
 */
export async function insertProcessedEvent(
  db: Kysely<ConsumerDatabase>,
  event: OutboxEvent<unknown>,
): Promise<boolean> {
  const result = await db
    .insertInto('processed_events')
    .values({
      event_id: event.eventId,
      aggregate_type: event.aggregateType,
      aggregate_id: event.aggregateId,
      sequence: event.sequence,
      type: event.type,
    })
    .onConflict((conflict) => conflict.column('event_id').doNothing())
    .executeTakeFirst()
  return (result.numInsertedOrUpdatedRows ?? 0n) > 0n
}
