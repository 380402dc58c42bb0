// outbox_record_event(p_source, …, p_digest) — body in force: migration 0005 (0004's work as two statements, and
// the policy 'off').
import type { ReceivedEvent } from '@outbox/protocol'
import { CompiledQuery, type Kysely, sql } from 'kysely'
import { OutboxError } from '../errors.js'
import type { FirstSequence, SequencePolicy } from '../options.js'
import { qualified, RECORD_EVENT_FUNCTION } from '../schema.js'

/**
 * What {@link RecordEvent} did:
 * - `duplicate`: the id was already recorded; nothing was written and the cursor was not touched.
 * - `mismatch`: as `duplicate`, but the id was recorded with another payload digest (the same id, another event).
 * - `recorded`: under `'off'`, the id is recorded; no cursor was read or written.
 * - `advanced`: the id is recorded and the cursor moved to the event's sequence (the policy says apply).
 * - `held`: the id is recorded and the cursor row is locked by this transaction, unchanged (or created at 0): the
 *   policy says stale or gap, and the caller reads the cursor to tell which.
 */
export type RecordEventResult = 'duplicate' | 'mismatch' | 'recorded' | 'advanced' | 'held'

/**
 * Runs the statement of {@link prepareRecordEvent} for one event, on the delivery's transaction. `eventId` is the id
 * as recorded (see `createApplyEvent`). Under an ordered policy the event must have its aggregate and sequence (the
 * consumer refuses events without them before this runs); under `'off'` they are recorded as NULL when absent, and
 * `initialCursor` is not used.
 */
export type RecordEvent = (
  trx: Kysely<any>,
  event: Pick<ReceivedEvent<unknown>, 'eventId' | 'aggregateType' | 'aggregateId' | 'sequence' | 'type'>,
  initialCursor: number,
  digest: string,
) => Promise<RecordEventResult>

/** The function's arguments, in its parameter order. */
const ARGUMENTS = [
  'source',
  'eventId',
  'aggregateType',
  'aggregateId',
  'sequence',
  'type',
  'policy',
  'firstSequence',
  'initialCursor',
  'digest',
] as const

const RESULTS: ReadonlySet<string> = new Set<RecordEventResult>([
  'duplicate',
  'mismatch',
  'recorded',
  'advanced',
  'held',
])

/**
 * Prepares, once per consumer, the call that records an event id and, for a new id under an ordered policy, locks
 * the aggregate's cursor and advances it when the policy says apply — ONE statement in ONE round trip, so the common
 * delivery is `BEGIN`, this, the handler's writes, `COMMIT`.
 *
 * Every row it reads or writes is the consumer's `source`'s: the id is recorded under `(source, event_id)` and the
 * cursor is `(source, aggregate_type, aggregate_id)`'s, so two senders reusing an id or an aggregate key never meet.
 *
 * Why a function (`outbox_record_event`, created by migration 0002, keyed by source since 0003): PL/pgSQL caches the
 * plans of its statements per connection. The same statement sent as text with parameters (Kysely cannot issue
 * prepared statements) was parsed and planned by PostgreSQL on every delivery — ≈ 110 µs more server time than a
 * plain insert, which kept `dedupe` near 0.8× a hand-written handler on the apply path. Measured on one connection,
 * median of 4000 calls each, the variants interleaved (`BEGIN`, the call, `COMMIT`; new ids, advancing cursors): on
 * PostgreSQL 15 322–344 µs per call instead of 433–462 µs when applying and 176–295 instead of 257–391 µs for a
 * duplicate; on PostgreSQL 18 653 instead of 802 µs (apply) and 592 instead of 726 µs (duplicate). A plain id insert
 * took 239–249 µs (PostgreSQL 15). The call text itself is built once here, because building and compiling a
 * statement with Kysely took ≈ 40 µs of CPU per request.
 *
 * What the function does (migration 0005's body, two statements whose plans PL/pgSQL caches):
 * - The id insert (`ON CONFLICT DO NOTHING`). A duplicate stops here and never touches the cursor lock. A concurrent
 *   duplicate blocks on the primary-key index entry of the first delivery until that ends; committed → nothing
 *   inserted (`duplicate`), rolled back → it inserts and goes on (exactly one applies). Under `'off'` the function
 *   returns `recorded` after it.
 * - The cursor upsert, `INSERT … ON CONFLICT DO UPDATE … WHERE applies`. `ON CONFLICT` locks the conflicting row
 *   even when the `WHERE` is false, and at READ COMMITTED it locks and judges the LATEST committed version, not the
 *   statement's snapshot: the second of two events of one aggregate waits for the first to end, then judges the
 *   cursor it left. Two FIRST events of a new aggregate meet on the primary key: the second waits for the first's
 *   insert to commit (then updates that row, judging it) or roll back (then inserts). This is why an upsert is used
 *   and not "insert if missing, then `SELECT … FOR UPDATE`": a row created by a concurrent transaction after the
 *   statement's snapshot would be invisible to the `SELECT`. A cached plan changes none of this: locking and the
 *   READ COMMITTED re-check happen when the statement runs.
 * - `applies` is `judgeSequence(policy, firstSequence, cursor, sequence).kind === 'apply'` written in SQL over the
 *   `p_policy` and `p_first_sequence` parameters; judgeSequence stays the one place that decides stale or gap.
 *   A property test runs this very function against judgeSequence (cursor.policies.test.ts). Every verdict that
 *   applies has `sequence > cursor`, so a cursor moved by it can only grow.
 * - A new cursor is created already advanced to `initialCursor` (the sequence, or 0 when `judgeSequence` says the
 *   first event does not apply — a strict gap, rolled back by the caller).
 *
 * Migrations 0002–0004 wrote the two as one data-modifying CTE; as two statements inside the function they are still
 * one round trip, and cost less (migration 0005 gives the figures). Rejected: `RETURNING OLD` (PostgreSQL 18 only),
 * which would have returned the old cursor here.
 *
 * The cursor moves BEFORE the handler runs: atomicity is the transaction's (a handler that throws rolls the advance
 * back with everything else), and a handler that swallows a database error leaves the transaction aborted, so
 * `COMMIT` rolls back and Kysely (≥ 0.29) throws — answered 500, nothing recorded. The function writes a new
 * cursor version only when it applies; a stale or gap event only locks the row.
 *
 * The digest (migration 0004): recorded with a new id; for a duplicate the function reads the recorded one by
 * primary key and answers `mismatch` when they differ — still the same one call, so a duplicate costs no extra round
 * trip.
 *
 * A schema migrated by an older consumer has no such function (0003's signature, without `p_digest`, is kept by
 * migration 0004 for the previous version during a rolling deploy): PostgreSQL answers 42883. One migrated before
 * 0005 refuses the policy `'off'` (22023, "unknown policy"). Both are turned here into {@link OutboxError}
 * `ERR_OUTBOX_SCHEMA_OUTDATED`, whose message says to run the consumer's migrations.
 *
 * @param db the consumer's Kysely instance (only used to compile the call once).
 * @param call `schema`: the consumer's schema, as given to `migrate` (undefined lets the search_path find the
 *   function); `source`, `policy` and `firstSequence`: the consumer's options, passed to every call.
 */
export function prepareRecordEvent(
  db: Kysely<any>,
  call: {
    readonly schema: string | undefined
    readonly source: string
    readonly policy: SequencePolicy
    readonly firstSequence: FirstSequence
  },
): RecordEvent {
  const { schema, source, policy, firstSequence } = call
  // Raw SQL: a function call, compiled once and then sent as text (no Kysely query built per delivery).
  const compiled = sql`select ${qualified(schema, RECORD_EVENT_FUNCTION)}(${sql.join(
    ARGUMENTS.map((name) => sql.val(name)),
  )}) as result`.compile(db)
  // Each argument must land in its own parameter, in order; anything else would pass values to the wrong ones.
  if (compiled.parameters.join() !== ARGUMENTS.join()) {
    throw new Error('recordEvent: the call was not compiled with one parameter per argument')
  }
  const text = compiled.sql
  const policyArgument = policy
  const firstSequenceArgument = String(firstSequence)
  const where = schema === undefined ? 'in the search_path' : `in schema "${schema}"`
  const migrateCall =
    schema === undefined ? 'migrate(db)' : `migrate(db, { schema: ${JSON.stringify(schema)} })`

  return async (trx, event, initialCursor, digest) => {
    const query = CompiledQuery.raw(text, [
      source,
      event.eventId,
      event.aggregateType ?? null,
      event.aggregateId ?? null,
      event.sequence ?? null,
      event.type,
      policyArgument,
      firstSequenceArgument,
      initialCursor,
      digest,
    ])
    let result: string | undefined
    try {
      const { rows } = await trx.executeQuery<{ result: string }>(query)
      result = rows[0]?.result
    } catch (error) {
      const { code, message } = error as { code?: unknown; message?: unknown }
      const missing =
        code === '42883' && typeof message === 'string' && message.includes(RECORD_EVENT_FUNCTION)
      // A function of migration 0004 or earlier, called under 'off' (which it does not know).
      const before0005 =
        policy === 'off' &&
        code === '22023' &&
        typeof message === 'string' &&
        message.includes('unknown policy')
      if (missing || before0005) {
        const why = missing
          ? `function ${RECORD_EVENT_FUNCTION} is missing`
          : `its ${RECORD_EVENT_FUNCTION} does not know sequence 'off'`
        throw new OutboxError(
          'ERR_OUTBOX_SCHEMA_OUTDATED',
          `the consumer tables ${where} were migrated by an older @outbox/consumer (${why}): run the consumer's migrations — ${migrateCall} from @outbox/consumer, or the script of consumerMigrationSql() — until then every delivery is answered 500 and retried`,
          { cause: error },
        )
      }
      throw error
    }
    if (result === undefined || !RESULTS.has(result)) {
      throw new Error(`recordEvent: ${RECORD_EVENT_FUNCTION} answered ${JSON.stringify(result)}`)
    }
    return result as RecordEventResult
  }
}
