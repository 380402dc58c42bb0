import type { Kysely, Transaction } from 'kysely'

/** How often an operator action chosen as a deadlock's victim starts again before it gives up. */
const DEADLOCK_RETRIES = 3

/**
 * Runs an operator action in a transaction of its own, again when PostgreSQL chose it as a deadlock's victim
 * (40P01): the actions lock counters and lanes in sorted order as `enqueueMany` does, but a transaction that
 * enqueues for two aggregates one `enqueue` at a time, in the opposite order, can still meet one — and the
 * application's transaction should not be the one that pays for an operator's action more than once.
 */
export async function inTransactionRetryingDeadlocks<T>(
  db: Kysely<any>,
  action: (trx: Transaction<any>) => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(action)
    } catch (error) {
      if ((error as { code?: unknown }).code !== '40P01' || attempt > DEADLOCK_RETRIES) throw error
    }
  }
}
