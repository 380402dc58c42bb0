import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { type Migration, Migrator } from 'kysely/migration'
import { describe, expect, it } from 'vitest'
import {
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  migrate,
  PRODUCER_MIGRATION_TABLE,
  Relay,
  silentLogger,
} from '../src/index.js'
import { producerMigrations } from '../src/migrations/index.js'

const t = useTestDatabase()

/** Migrates a fresh schema as the release before subscriptions did: 0001 to 0007, recorded as that release did. */
async function migrateBeforeSubscriptions(schema: string): Promise<void> {
  await sql`CREATE SCHEMA ${sql.id(schema)}`.execute(t.db)
  const migrations: Record<string, Migration> = {}
  for (const migration of producerMigrations.slice(0, 7)) {
    migrations[migration.name] = {
      up: async (trx) => void (await sql.raw(migration.sql(schema)).execute(trx)),
    }
  }
  const { error } = await new Migrator({
    db: t.db,
    provider: { getMigrations: async () => migrations },
    migrationTableSchema: schema,
    migrationTableName: PRODUCER_MIGRATION_TABLE,
    migrationLockTableName: `${PRODUCER_MIGRATION_TABLE}_lock`,
  }).migrateToLatest()
  if (error) throw error
}

describe('upgrading to subscriptions (0008)', () => {
  it('keeps pending events, their backoff and their order; the endpoint relay delivers them as before', async () => {
    const schema = 'before_subscriptions'
    await migrateBeforeSubscriptions(schema)
    // Events written by the previous release's enqueue (its seven-argument function), one head in backoff.
    for (const [aggregateId, count] of [
      ['u1', 3],
      ['u2', 2],
    ] as const) {
      for (let n = 0; n < count; n++) {
        await sql`
          SELECT ${sql.id(schema, 'outbox_enqueue')}(gen_random_uuid(), 'order', ${aggregateId}, 'order.updated',
                 ${JSON.stringify({ n })}::jsonb, 8, NULL::text)`.execute(t.db)
      }
    }
    await sql`
      UPDATE ${sql.id(schema, 'outbox')} SET attempts = 1, available_at = now() + interval '1 hour'
      WHERE aggregate_id = 'u2'`.execute(t.db)

    await migrate(t.db, { schema })

    const { rows } = await sql<{ subscription_id: string; n: string }>`
      SELECT subscription_id, count(*) AS n FROM ${sql.id(schema, 'outbox')} GROUP BY subscription_id`.execute(
      t.db,
    )
    expect(rows).toEqual([{ subscription_id: IMPLICIT_SUBSCRIPTION_ID, n: '5' }])
    const sink = await startSink()
    try {
      const relay = new Relay({ db: t.db, schema, endpoint: sink.url, logger: silentLogger })
      expect(await relay.runOnce()).toEqual({ delivered: 3, failed: 0, dead: 0 })
      expect(sink.requests.map((request) => [request.json.aggregate_id, request.json.sequence])).toEqual([
        ['u1', 1],
        ['u1', 2],
        ['u1', 3],
      ])
      // The head in backoff kept its retry time; once due, its lane goes on in order, and new events follow it.
      await sql`UPDATE ${sql.id(schema, 'outbox')} SET available_at = now() WHERE aggregate_id = 'u2'`.execute(
        t.db,
      )
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(
            trx,
            { aggregateType: 'order', aggregateId: 'u2', eventType: 'order.updated', payload: {} },
            { schema },
          ),
        )
      expect(await relay.runOnce()).toEqual({ delivered: 3, failed: 0, dead: 0 })
      expect(
        sink.requests.slice(3).map((request) => [request.json.aggregate_id, request.json.sequence]),
      ).toEqual([
        ['u2', 1],
        ['u2', 2],
        ['u2', 3],
      ])
    } finally {
      await sink.close()
    }
  })

  it('a relay refuses a schema that a newer release migrated, naming the migrations it does not know', async () => {
    const schema = 'from_the_future'
    await migrate(t.db, { schema })
    await sql`
      INSERT INTO ${sql.id(schema, PRODUCER_MIGRATION_TABLE)} (name, timestamp)
      VALUES ('0099_from_the_future', now()::text)`.execute(t.db)
    const relay = new Relay({ db: t.db, schema, endpoint: 'http://127.0.0.1:9/hooks', logger: silentLogger })
    await expect(relay.runOnce()).rejects.toMatchObject({
      code: 'ERR_OUTBOX_SCHEMA_NEWER',
      message: expect.stringMatching(
        /migrated by a newer @outbox\/producer \(0099_from_the_future\): upgrade/,
      ),
    })
    await sql`DELETE FROM ${sql.id(schema, PRODUCER_MIGRATION_TABLE)} WHERE name = '0099_from_the_future'`.execute(
      t.db,
    )
    expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
  })

  it("refuses the previous release's relay with OB001 and a message that says to upgrade", async () => {
    const schema = 'old_relay'
    await migrate(t.db, { schema })
    for (const claim of [
      sql`SELECT * FROM ${sql.id(schema, 'outbox_claim_lanes')}(8, 30000, 1000, 10, 1000000::bigint)`,
      sql`SELECT * FROM ${sql.id(schema, 'outbox_claim_lanes')}(8, 30000::bigint, 1000, 10)`,
      sql`SELECT ${sql.id(schema, 'outbox_new_row_due')}('order', '1')`,
    ]) {
      await expect(claim.execute(t.db)).rejects.toMatchObject({
        code: 'OB001',
        message: expect.stringMatching(/newer than this @outbox\/producer .*: upgrade @outbox\/producer/),
      })
    }
  })
})
