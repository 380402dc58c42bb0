import type { DeliveryStatus, OutboxEvent, ReceivedEvent } from '@outbox/protocol'
import type { Kysely, Transaction } from 'kysely'
import { initialCursor, judgeHeldCursor } from './cursor.js'
import type { ResolvedConsumerOptions } from './options.js'
import { type ConsumerDatabase, inSchema } from './schema.js'
import { prepareRecordEvent } from './sql/record-event.js'

/** What happened to one well-formed, authentic event. */
export type ApplyOutcome =
  | {
      readonly kind: 'delivered'
      readonly status: DeliveryStatus
      readonly cursor?: number
      /** On a duplicate: the id was recorded with another payload digest. */
      readonly payloadMismatch?: boolean
    }
  | { readonly kind: 'gap'; readonly expected: number }

/** Marks an error thrown by the application's handler, as opposed to one of ours. */
export class HandlerFailure extends Error {
  constructor(cause: unknown) {
    super('the handler threw', { cause })
  }
}

/** Thrown inside the transaction to roll back the id just recorded when strict order says "not yet". */
class SequenceGap extends Error {
  constructor(readonly expected: number) {
    super('sequence gap')
  }
}

const DUPLICATE: ApplyOutcome = Object.freeze({ kind: 'delivered', status: 'duplicate_ignored' })
const MISMATCH: ApplyOutcome = Object.freeze({
  kind: 'delivered',
  status: 'duplicate_ignored',
  payloadMismatch: true,
})
const APPLIED: ApplyOutcome = Object.freeze({ kind: 'delivered', status: 'applied' })

/** Runs the transaction of one authentic, well-formed event; see {@link createApplyEvent}. */
export type ApplyEvent = (
  event: ReceivedEvent<unknown>,
  run: (trx: Transaction<any>) => unknown,
  digest: string,
) => Promise<ApplyOutcome>

/**
 * Returns the function that runs the transaction of DESIGN.md "Consumer" for one consumer (its statement is prepared
 * here, once): record the id under the consumer's `source` (duplicates stop here), lock and judge the aggregate's
 * cursor, run the handler, commit — as `BEGIN`, ONE statement (sql/record-event.ts: a call of the
 * `outbox_record_event` function, which records the id, locks the cursor, creating it for a new aggregate, and
 * advances it when the policy says apply), the handler, `COMMIT`. Only a stale event or a gap costs one more
 * statement, to read the cursor it was judged against. Under `'off'` the same call records the id only (with NULLs
 * for an event that has no aggregate or sequence). Every row read or written is the consumer `source`'s.
 *
 * READ COMMITTED is set explicitly: the duplicate and ordering arguments in the sql/ modules rely on a blocked
 * statement re-reading (and judging) the latest committed row, which REPEATABLE READ or SERIALIZABLE (if a
 * database defaults to them) would turn into serialization failures.
 *
 * The cursor is advanced before the handler runs, inside the same transaction: a handler that throws rolls it
 * back with the id. A handler that catches and swallows a database error leaves the transaction aborted;
 * PostgreSQL then answers `COMMIT` with a silent rollback, which Kysely (≥ 0.29) turns into an error, so the
 * answer is a 500 the producer retries — never a `200 applied` with nothing committed (a lost effect).
 */
export function createApplyEvent(options: ResolvedConsumerOptions): ApplyEvent {
  const { sequence: policy, firstSequence, schema, source } = options
  const recordEvent = prepareRecordEvent(options.db, { schema, source, policy, firstSequence })
  // This project's ids are UUIDs, which the envelope accepts in either case: record the lower-case text a `uuid`
  // column stored before migration 0003 (and that its type change left), so a retry written in another case is
  // still the same id. Another sender's id is recorded exactly as sent.
  const recordedId =
    options.defaultEnvelope === undefined ? (id: string) => id : (id: string) => id.toLowerCase()

  return async (received, run, digest) => {
    const id = recordedId(received.eventId)
    const recordable = id === received.eventId ? received : { ...received, eventId: id }
    try {
      return await options.db
        .transaction()
        .setIsolationLevel('read committed')
        .execute(async (trx): Promise<ApplyOutcome> => {
          // Under an ordered policy receive() refuses an event without aggregate and sequence; under 'off' the
          // initial cursor is not used.
          const initial = policy === 'off' ? 0 : initialCursor(policy, firstSequence, recordable.sequence!)
          const recorded = await recordEvent(trx, recordable, initial, digest)
          if (recorded === 'duplicate') return DUPLICATE
          if (recorded === 'mismatch') return MISMATCH
          if (recorded === 'held' && policy !== 'off') {
            const event = recordable as OutboxEvent<unknown>
            const own = inSchema(trx as unknown as Kysely<ConsumerDatabase>, schema)
            const verdict = await judgeHeldCursor(own, source, event, policy, firstSequence, event.sequence)
            if (verdict.kind === 'gap') throw new SequenceGap(verdict.expected)
            return { kind: 'delivered', status: 'stale_ignored', cursor: verdict.cursor }
          }

          try {
            await run(trx)
          } catch (error) {
            throw new HandlerFailure(error)
          }
          return APPLIED
        })
    } catch (error) {
      if (error instanceof SequenceGap) return { kind: 'gap', expected: error.expected }
      throw error
    }
  }
}
