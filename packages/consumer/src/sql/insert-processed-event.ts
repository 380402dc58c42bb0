import type { ReceivedEvent } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { ConsumerDatabase } from '../schema.js'

/** What {@link insertProcessedEvent} did: recorded the id, or found it recorded with the same or another digest. */
export type InsertProcessedResult = 'recorded' | 'duplicate' | 'mismatch'

/**
 * Records an event id with its payload digest under the consumer's `source`; a duplicate is told apart from the
 * same id recorded with another digest (`mismatch`).
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
 *
 * The recorded digest is read in the same statement (a data-modifying CTE beside a primary-key lookup), so a
 * duplicate stays one round trip. The lookup sees the statement's snapshot: a duplicate that waited on a concurrent
 * first delivery's key sees no digest and reports no mismatch — a retry racing its own first attempt, the case
 * where one is least likely.
 *
 * @param event `eventId` is the id as recorded (see `createApplyEvent`).
 */
export async function insertProcessedEvent(
  db: Kysely<ConsumerDatabase>,
  source: string,
  event: ReceivedEvent<unknown>,
  digest: string,
): Promise<InsertProcessedResult> {
  const row = await db
    .with('recorded', (cte) =>
      cte
        .insertInto('processed_events')
        .values({
          source,
          event_id: event.eventId,
          aggregate_type: event.aggregateType ?? null,
          aggregate_id: event.aggregateId ?? null,
          sequence: event.sequence ?? null,
          type: event.type,
          payload_digest: digest,
        })
        .onConflict((conflict) => conflict.columns(['source', 'event_id']).doNothing())
        .returning('event_id'),
    )
    .selectNoFrom((eb) => [
      eb.exists(eb.selectFrom('recorded').select('event_id')).as('recorded'),
      eb
        .selectFrom('processed_events')
        .select('payload_digest')
        .where('source', '=', source)
        .where('event_id', '=', event.eventId)
        .as('recorded_digest'),
    ])
    .executeTakeFirstOrThrow()
  if (row.recorded) return 'recorded'
  const recorded = row.recorded_digest
  return recorded !== null && recorded !== undefined && recorded !== digest ? 'mismatch' : 'duplicate'
}
