// outbox_insert_deliveries — body in force: migration 0021 (0008's, its type match written out).
import { sql, type Transaction } from 'kysely'
import type { ValidatedEvent } from '../event-input.js'
import { withCurrentSchema } from '../schema-outdated.js'
import type { EnqueuedEvent } from './insert-event.js'
import type { TransactionContext } from './sql-context.js'

/**
 * Enqueues several events: one counter upsert per aggregate, taken in sorted key order (byte order, as a redrive
 * locks them), then one statement that fans each event out to the subscriptions that want it, in the given order
 * (the schema's `outbox_insert_deliveries`, as enqueue does).
 *
 * Why sorted: two transactions enqueueing for aggregates A and B in opposite orders would otherwise each hold one
 * counter row and wait for the other's (deadlock, 40P01). Taking counter locks in one global order makes that
 * impossible. Each aggregate's counter is bumped once by its number of events, so the events of one call get
 * consecutive sequences in the order they were given. A schema without the fan-out function is
 * thrown as `ERR_OUTBOX_SCHEMA_OUTDATED`.
 */
export async function insertEvents(
  ctx: TransactionContext,
  request: {
    readonly events: readonly ValidatedEvent[]
    /** One new id per event, in the same order. */
    readonly eventIds: readonly string[]
    readonly channel: string | null
  },
): Promise<EnqueuedEvent[]> {
  return await withCurrentSchema(ctx.schema, () => writeEvents(ctx.db, ctx.schema, request))
}

async function writeEvents(
  trx: Transaction<any>,
  schema: string,
  request: Parameters<typeof insertEvents>[1],
): Promise<EnqueuedEvent[]> {
  const { events, eventIds, channel } = request
  const groups = new Map<string, { aggregateType: string; aggregateId: string; indexes: number[] }>()
  events.forEach((event, index) => {
    const key = JSON.stringify([event.aggregateType, event.aggregateId])
    const group = groups.get(key) ?? {
      aggregateType: event.aggregateType,
      aggregateId: event.aggregateId,
      indexes: [],
    }
    group.indexes.push(index)
    groups.set(key, group)
  })
  const ordered = [...groups.values()].sort(
    (a, b) => compareText(a.aggregateType, b.aggregateType) || compareText(a.aggregateId, b.aggregateId),
  )
  const sequences = new Array<number>(events.length)
  const counter = sql.id(schema, 'outbox_counter')
  for (const group of ordered) {
    const count = group.indexes.length
    // Raw SQL: an upsert that adds to the stored counter and returns it, kept beside its twin in the function.
    const { rows } = await sql<{ last_sequence: string }>`
      INSERT INTO ${counter} AS c (aggregate_type, aggregate_id, last_sequence)
      VALUES (${group.aggregateType}, ${group.aggregateId}, ${count})
      ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + ${count}
      RETURNING last_sequence`.execute(trx)
    const last = Number(rows[0]!.last_sequence)
    group.indexes.forEach((eventIndex, position) => {
      sequences[eventIndex] = last - count + 1 + position
    })
  }
  const deliveries = sql.id(schema, 'outbox_insert_deliveries')
  const notify =
    channel === null ? sql`` : sql`, CASE WHEN sum(d.taken) > 0 THEN pg_notify(${channel}, '') END`
  // Raw SQL: the schema's fan-out function (the one enqueue uses) over unnest arrays, in the given order, in one
  // statement ending in the NOTIFY when any subscription took an event.
  await sql`
    SELECT sum(d.taken)${notify} FROM (
      SELECT ${deliveries}(t.event_id, t.aggregate_type, t.aggregate_id, t.sequence, t.event_type, t.payload,
                           t.payload_bytes, t.tenant) AS taken
      FROM unnest(
        ${eventIds}::uuid[], ${events.map((e) => e.aggregateType)}::text[], ${events.map((e) => e.aggregateId)}::text[],
        ${sequences}::bigint[], ${events.map((e) => e.eventType)}::text[], ${events.map((e) => e.payloadJson)}::jsonb[],
        ${events.map((e) => e.payloadBytes)}::integer[], ${events.map((e) => e.tenant)}::text[]
      ) WITH ORDINALITY AS t(event_id, aggregate_type, aggregate_id, sequence, event_type, payload, payload_bytes,
                             tenant, n)
      ORDER BY t.n
    ) d`.execute(trx)
  return events.map((_, index) => ({ eventId: eventIds[index]!, sequence: sequences[index]! }))
}

/**
 * Byte-wise comparison of the UTF-8 encodings, so every process sorts keys the same way whatever its locale, and the
 * same way as PostgreSQL's `COLLATE "C"` in a UTF-8 database — the order in which `redrive` locks counters, so the
 * two never deadlock. (JavaScript's `<` compares UTF-16 code units, which orders characters above U+FFFF before
 * U+E000–U+FFFF: not the byte order.)
 */
function compareText(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b))
}
