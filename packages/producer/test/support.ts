import type { Kysely } from 'kysely'
import { enqueue } from '../src/index.js'

/** Enqueues `count` events for each aggregate id, each in its own transaction, in round-robin order. */
export async function seedEvents(
  db: Kysely<any>,
  aggregates: readonly string[],
  count: number,
  options: { aggregateType?: string; schema?: string } = {},
): Promise<void> {
  for (let n = 0; n < count; n++) {
    await Promise.all(
      aggregates.map((id) =>
        db.transaction().execute((trx) =>
          enqueue(
            trx,
            {
              aggregateType: options.aggregateType ?? 'order',
              aggregateId: id,
              eventType: 'order.updated',
              payload: { id, n },
            },
            { schema: options.schema },
          ),
        ),
      ),
    )
  }
}

/** Polls until `check` returns true or `timeoutMs` passes; throws with `what` on time-out. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 15_000,
): Promise<void> {
  const start = Date.now()
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** Millisecond retry schedule with many attempts: random-failure tests are then not flaky. */
export const FAST_SCHEDULE: readonly number[] = Array.from({ length: 30 }, () => 5)

/** A promise with its resolve function outside (Node 20 has no Promise.withResolvers). */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((settle) => {
    resolve = settle
  })
  return { promise, resolve }
}
