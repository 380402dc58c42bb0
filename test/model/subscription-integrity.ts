import { checkIntegrity } from '@outbox/producer'
import { type Kysely, sql } from 'kysely'

/** The schema of views that show one subscription's rows and lanes (the one named by {@link SETTING}). */
const SCRATCH = 'model_check'
/** The transaction-local setting that names the subscription the views show. */
const SETTING = 'model.subscription'

/**
 * Creates, once per database, views of the outbox's three tables that show one subscription's rows and lanes (the
 * counters, per aggregate, are shared): `checkIntegrity` pointed at this schema checks that subscription alone.
 */
export async function createIntegrityScratch(db: Kysely<any>): Promise<void> {
  await sql`CREATE SCHEMA IF NOT EXISTS ${sql.id(SCRATCH)}`.execute(db)
  for (const table of ['outbox', 'outbox_lane']) {
    await sql`CREATE OR REPLACE VIEW ${sql.id(SCRATCH, table)} AS SELECT * FROM ${sql.id('public', table)}
      WHERE subscription_id = current_setting(${sql.lit(SETTING)})::uuid`.execute(db)
  }
  await sql`CREATE OR REPLACE VIEW ${sql.id(SCRATCH, 'outbox_counter')} AS SELECT * FROM public.outbox_counter`.execute(
    db,
  )
}

/**
 * `checkIntegrity` per subscription: every rule of the liveness issue holds for each subscription's lanes on their
 * own. The released `checkIntegrity` joins rows to lanes by aggregate alone (it predates subscriptions), so on an
 * outbox with several subscriptions it would pair one subscription's head with another's lane; here it reads, for
 * each subscription in turn, views that show only that subscription's rows and lanes, all in one snapshot. Returns
 * one line per violation, naming the subscription by its model key.
 */
export async function checkIntegrityPerSubscription(
  db: Kysely<any>,
  keyOf: (subscriptionId: string) => string,
  maxLeaseMs: number,
): Promise<string[]> {
  return await db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (trx) => {
      const { rows } = await sql<{ id: string }>`
        SELECT subscription_id AS id FROM outbox UNION SELECT subscription_id FROM outbox_lane`.execute(trx)
      const lines: string[] = []
      for (const { id } of rows) {
        await sql`SELECT set_config(${SETTING}, ${id}, true)`.execute(trx)
        const report = await checkIntegrity(trx, { schema: SCRATCH, maxLeaseMs })
        for (const v of report.violations) lines.push(`${keyOf(id)}: ${v.kind} ${v.aggregateId}: ${v.detail}`)
      }
      return lines
    })
}
