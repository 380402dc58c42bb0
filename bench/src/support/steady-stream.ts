import { enqueue } from '@outbox/producer'
import type { Kysely } from 'kysely'
import { now, sleep } from './timing.js'

/** A steady stream of `order.updated` events, each enqueued in a transaction of its own. */
export interface SteadyStreamOptions {
  /** Aggregate id of each event, in enqueue order: event `n` goes to `aggregates[n]`. */
  readonly aggregates: readonly string[]
  /** Events per second, started on a fixed schedule (a slow commit does not delay the next event's start). */
  readonly perSecond: number
  /** Checked before each event: true ends the stream early (a time-boxed case). @defaultValue never */
  readonly stop?: () => boolean
}

/** What a stream did: when each event's COMMIT returned, on the monotonic clock (0 for events never enqueued). */
export interface SteadyStreamResult {
  readonly committedAt: Float64Array
  /** Events enqueued (all of them, unless `stop` ended the stream). */
  readonly enqueued: number
}

/**
 * Enqueues event `n` at `n ÷ perSecond` seconds after the start, without waiting for the previous one — except
 * that an aggregate's next event waits for its previous commit, as one writer per aggregate would, so each
 * aggregate's sequence order is the intended order. The payload carries `n`, which the sink maps back to the
 * commit time: latency is COMMIT returning → first receipt.
 */
export async function enqueueSteadily(
  db: Kysely<any>,
  options: SteadyStreamOptions,
): Promise<SteadyStreamResult> {
  const { aggregates, perSecond } = options
  const committedAt = new Float64Array(aggregates.length)
  const interval = 1000 / perSecond
  const t0 = now()
  const last = new Map<string, Promise<void>>()
  let enqueued = 0
  for (let n = 0; n < aggregates.length; n++) {
    if (options.stop?.()) break
    const wait = t0 + n * interval - now()
    if (wait > 1) await sleep(wait)
    const aggregateId = aggregates[n]!
    const next = (last.get(aggregateId) ?? Promise.resolve()).then(async () => {
      await db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId,
          eventType: 'order.updated',
          payload: { order_id: aggregateId, n },
        }),
      )
      committedAt[n] = now()
    })
    last.set(aggregateId, next)
    enqueued = n + 1
  }
  await Promise.all(last.values())
  return { committedAt, enqueued }
}

/** Latencies (ms) of the events both committed and received: first receipt − COMMIT returning. */
export function latencies(committedAt: Float64Array, receivedAt: Float64Array): number[] {
  const values: number[] = []
  for (let n = 0; n < committedAt.length; n++) {
    if (committedAt[n]! > 0 && receivedAt[n]! > 0) values.push(receivedAt[n]! - committedAt[n]!)
  }
  return values
}
