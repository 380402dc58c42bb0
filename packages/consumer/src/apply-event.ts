import type { DeliveryStatus, OutboxEvent } from '@outbox/protocol'
import type { Request } from 'express'
import type { Kysely, Transaction } from 'kysely'
import { claimCursor, judgeSequence } from './cursor.js'
import type { ResolvedConsumerOptions } from './options.js'
import { type ConsumerDatabase, inSchema } from './schema.js'
import { advanceCursor } from './sql/advance-cursor.js'
import { insertProcessedEvent } from './sql/insert-processed-event.js'

/**
 * The application's code for one event, given to `dedupe`.
 *
 * It runs inside the transaction that records the event id, so its writes on `trx` commit together with that
 * record or not at all: an effect is applied at most once, and — because a failure answers 500 and the producer
 * retries — at least once. Throw to refuse the event; never answer the request yourself. `TData` types
 * `event.data` (it is not checked at run time), `DB` types `trx`.
 *
 * @example
 * ```ts
 * import type { DedupeHandler } from '@outbox/consumer'
 *
 * interface Database {
 *   orders: { id: string; status: string }
 * }
 * const onOrderEvent: DedupeHandler<{ order_id: string; status: string }, Database> = async (event, trx) => {
 *   await trx.updateTable('orders').set({ status: event.data.status }).where('id', '=', event.data.order_id).execute()
 * }
 * ```
 */
export type DedupeHandler<TData = unknown, DB = any> = (
  event: OutboxEvent<TData>,
  trx: Transaction<DB>,
  req: Request,
) => unknown

/** What happened to one well-formed, authentic event. */
export type ApplyOutcome =
  | { readonly kind: 'delivered'; readonly status: DeliveryStatus; readonly cursor?: number }
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

/**
 * Runs the transaction of DESIGN.md "Consumer": record the id (duplicates stop here), lock and judge the
 * aggregate's cursor, run the handler, advance the cursor, commit. READ COMMITTED is set explicitly: the
 * duplicate and ordering arguments in the sql/ modules rely on a blocked statement re-reading the committed row,
 * which REPEATABLE READ or SERIALIZABLE (if a database defaults to them) would turn into serialization failures.
 *
 * A handler that catches and swallows a database error leaves the transaction aborted; PostgreSQL then answers
 * `COMMIT` with a silent rollback. Kysely (≥ 0.29) turns that ROLLBACK tag into an error, so the answer is a 500
 * the producer retries — never a `200 applied` with nothing committed (a lost effect).
 */
export async function applyEvent<TData>(
  options: ResolvedConsumerOptions,
  event: OutboxEvent<TData>,
  handler: DedupeHandler<TData>,
  req: Request,
): Promise<ApplyOutcome> {
  try {
    return await options.db
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (trx): Promise<ApplyOutcome> => {
        const own = inSchema(trx as unknown as Kysely<ConsumerDatabase>, options.schema)
        if (!(await insertProcessedEvent(own, event)))
          return { kind: 'delivered', status: 'duplicate_ignored' }

        if (options.sequence !== 'off') {
          const cursor = await claimCursor(own, event)
          const verdict = judgeSequence(options.sequence, options.firstSequence, cursor, event.sequence)
          if (verdict.kind === 'gap') throw new SequenceGap(verdict.expected)
          if (verdict.kind === 'stale') return { kind: 'delivered', status: 'stale_ignored', cursor }
        }

        try {
          await handler(event, trx, req)
        } catch (error) {
          throw new HandlerFailure(error)
        }

        if (options.sequence !== 'off') await advanceCursor(own, event, event.sequence)
        return { kind: 'delivered', status: 'applied' }
      })
  } catch (error) {
    if (error instanceof SequenceGap) return { kind: 'gap', expected: error.expected }
    throw error
  }
}
