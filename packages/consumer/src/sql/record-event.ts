import type { OutboxEvent } from '@outbox/protocol'
import { CompiledQuery, type Expression, type Kysely, type RawBuilder, sql } from 'kysely'
import type { FirstSequence } from '../options.js'
import type { ConsumerDatabase } from '../schema.js'

/** A sequence policy that keeps a cursor (under `'off'` only insert-processed-event.ts runs). */
export type OrderedPolicy = 'monotonic' | 'strict'

/**
 * What {@link RecordEvent} did:
 * - `duplicate`: the id was already recorded; nothing was written and the cursor was not touched.
 * - `advanced`: the id is recorded and the cursor moved to the event's sequence (the policy says apply).
 * - `held`: the id is recorded and the cursor row is locked by this transaction, unchanged (or created at 0): the
 *   policy says stale or gap, and the caller reads the cursor to tell which.
 */
export type RecordEventResult = 'duplicate' | 'advanced' | 'held'

/** Runs the statement of {@link prepareRecordEvent} for one event, on the delivery's transaction. */
export type RecordEvent = (
  trx: Kysely<any>,
  event: OutboxEvent<unknown>,
  initialCursor: number,
) => Promise<RecordEventResult>

/**
 * The SQL form of `judgeSequence(policy, firstSequence, cursor, sequence).kind === 'apply'`, over a cursor column;
 * `previous` is `sequence - 1`.
 *
 * `judgeSequence` stays the one place that decides stale or gap; this predicate only answers "apply?", inside the
 * statement that holds the cursor's row lock, so the cursor it reads is the one it advances. Its equivalence to
 * `judgeSequence` is proven against PostgreSQL by a property test (cursor.policies.test.ts). Every verdict that
 * applies has `sequence > cursor`, so a cursor moved by it can only grow.
 */
export function appliesSql(
  cursor: Expression<unknown>,
  policy: OrderedPolicy,
  firstSequence: FirstSequence,
  sequence: unknown,
  previous: unknown,
): RawBuilder<boolean> {
  if (policy === 'monotonic') return sql<boolean>`${cursor} < ${sequence}`
  if (firstSequence === 'any') return sql<boolean>`(${cursor} = 0 or ${cursor} = ${previous})`
  return sql<boolean>`${cursor} = ${previous}`
}

/** The values the statement takes per event; it is compiled once with a {@link Slot} in the place of each. */
interface SlotValues {
  readonly eventId: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly sequence: number
  readonly type: string
  readonly initialCursor: number
  readonly previous: number
}

/** Stands for one per-event value while the statement is compiled once (see {@link prepareRecordEvent}). */
class Slot {
  constructor(readonly name: keyof SlotValues) {}
}

/**
 * Compiles, once per consumer, the statement that records an event id and, for a new id, locks the aggregate's
 * cursor and advances it when the policy says apply — ONE statement, so the common delivery is `BEGIN`, this, the
 * handler's writes, `COMMIT`. Compiled once because building and compiling it with Kysely took ≈ 40 µs of CPU
 * per request; each parameter is compiled from a {@link Slot}, and every call fills the slots in.
 *
 * Shape: a data-modifying CTE inserts the id (`ON CONFLICT DO NOTHING`) and feeds the cursor upsert, so:
 * - A duplicate stops at the first CTE: it yields no row, the upsert gets no input and never touches the cursor
 *   lock. A concurrent duplicate blocks on the primary-key index entry of the first delivery until that ends;
 *   committed → no row (`duplicate`), rolled back → it inserts and goes on (exactly one applies).
 * - The cursor upsert is `INSERT … ON CONFLICT DO UPDATE … WHERE applies`. `ON CONFLICT` locks the conflicting
 *   row even when the `WHERE` is false, and at READ COMMITTED it locks and judges the LATEST committed version,
 *   not the statement's snapshot: the second of two events of one aggregate waits for the first to end, then
 *   judges the cursor it left. Two FIRST events of a new aggregate meet on the primary key: the second waits for
 *   the first's insert to commit (then updates that row, judging it) or roll back (then inserts). This is why an
 *   upsert is used and not "insert if missing, then `SELECT … FOR UPDATE`" in one statement: all CTEs share one
 *   snapshot, so a row created concurrently (or by a sibling CTE) would be invisible to the `SELECT`.
 * - A new cursor is created already advanced to `initialCursor` (the sequence, or 0 when `judgeSequence` says the
 *   first event does not apply — a strict gap, rolled back by the caller).
 *
 * The cursor moves BEFORE the handler runs: atomicity is the transaction's (a handler that throws rolls the advance
 * back with everything else), and a handler that swallows a database error leaves the transaction aborted, so
 * `COMMIT` rolls back and Kysely (≥ 0.29) throws — answered 500, nothing recorded. The statement writes a new
 * cursor version only when it applies (as the `UPDATE` after the handler did before); a stale or gap event only
 * locks the row. Rejected: `RETURNING OLD` (PostgreSQL 18 only), which would have returned the old cursor here;
 * and two statements (insert, then upsert), one more round trip for ≈ the same server work.
 *
 * @param db the consumer's Kysely instance, already scoped to its schema (plugins apply at compile time).
 */
export function prepareRecordEvent(
  db: Kysely<ConsumerDatabase>,
  policy: OrderedPolicy,
  firstSequence: FirstSequence,
): RecordEvent {
  // Typed as the columns' values so the builder checks the statement; they are Slots until compiled.
  const slot = <T>(name: keyof SlotValues) => new Slot(name) as unknown as T
  const compiled = db
    .with('recorded', (db) =>
      db
        .insertInto('processed_events')
        .values({
          event_id: slot<string>('eventId'),
          aggregate_type: slot<string>('aggregateType'),
          aggregate_id: slot<string>('aggregateId'),
          sequence: slot<number>('sequence'),
          type: slot<string>('type'),
        })
        .onConflict((conflict) => conflict.column('event_id').doNothing())
        .returning(['aggregate_type', 'aggregate_id']),
    )
    .with('cursor', (db) =>
      db
        .insertInto('consumer_cursors')
        .columns(['aggregate_type', 'aggregate_id', 'last_sequence'])
        .expression((eb) =>
          eb
            .selectFrom('recorded')
            .select([
              'recorded.aggregate_type',
              'recorded.aggregate_id',
              sql<number>`${slot('initialCursor')}::bigint`.as('last_sequence'),
            ]),
        )
        .onConflict((conflict) =>
          conflict
            .columns(['aggregate_type', 'aggregate_id'])
            .doUpdateSet({ last_sequence: slot<number>('sequence'), updated_at: sql`now()` })
            .where(() =>
              appliesSql(
                sql.ref('consumer_cursors.last_sequence'),
                policy,
                firstSequence,
                slot('sequence'),
                slot('previous'),
              ),
            ),
        )
        .returning('last_sequence'),
    )
    // A scalar subquery, not a join: the same answer, and a little cheaper for PostgreSQL to plan.
    .selectFrom('recorded')
    .select((eb) => eb.selectFrom('cursor').select('cursor.last_sequence').as('last_sequence'))
    .compile()

  const names = compiled.parameters.map((parameter) => {
    // A value that is not a Slot would be frozen into every call: refuse to build such a statement at all.
    if (!(parameter instanceof Slot)) throw new Error('recordEvent: a parameter was compiled without a slot')
    return parameter.name
  })

  return async (trx, event, initialCursor) => {
    const values: SlotValues = {
      eventId: event.eventId,
      aggregateType: event.aggregateType,
      aggregateId: event.aggregateId,
      sequence: event.sequence,
      type: event.type,
      initialCursor,
      previous: event.sequence - 1,
    }
    const query = CompiledQuery.raw(
      compiled.sql,
      names.map((name) => values[name]),
    )
    const { rows } = await trx.executeQuery<{ last_sequence: string | number | null }>(query)
    const row = rows[0]
    if (row === undefined) return 'duplicate'
    return row.last_sequence !== null && Number(row.last_sequence) === event.sequence ? 'advanced' : 'held'
  }
}
