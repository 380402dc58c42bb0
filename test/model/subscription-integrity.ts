import { checkIntegrity } from '@outbox/producer'
import type { Kysely } from 'kysely'

/**
 * `checkIntegrity` with each violation named by the model's key of its subscription: every rule of the liveness
 * issue holds for each subscription's lanes on their own (the check keys every rule by subscription and aggregate;
 * a shared counter's violation, which belongs to no one subscription, is named `counter`).
 */
export async function checkIntegrityPerSubscription(
  db: Kysely<any>,
  keyOf: (subscriptionId: string) => string,
  maxLeaseMs: number,
): Promise<string[]> {
  const report = await checkIntegrity(db, { maxLeaseMs })
  return report.violations.map(
    (v) =>
      `${v.subscriptionId === null ? 'counter' : keyOf(v.subscriptionId)}: ${v.kind} ${v.aggregateId}: ${v.detail}`,
  )
}
