import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql, type Transaction } from 'kysely'
import { describe, expect, it } from 'vitest'
import {
  enqueue,
  enqueueMany,
  migrate,
  PRODUCER_MIGRATION_TABLE,
  producerMigrationSql,
  prune,
  Relay,
  stats,
} from '../src/index.js'

const t = useTestDatabase()

/** The tables the producer owns; the test template also holds the consumer's, which are not compared here. */
const PRODUCER_TABLES = [
  'outbox',
  'outbox_audit',
  'outbox_counter',
  'outbox_delivery_attempt',
  'outbox_lane',
  'outbox_subscription',
  'outbox_subscription_secret',
  PRODUCER_MIGRATION_TABLE,
  `${PRODUCER_MIGRATION_TABLE}_lock`,
]

/** Every migration step, in order. */
const PRODUCER_MIGRATIONS = [
  '0001_outbox',
  '0002_lane_claim_token',
  '0003_enqueue_function',
  '0004_claim_function',
  '0005_enqueue_inline',
  '0006_claim_hashed_busy',
  '0007_liveness',
  '0008_subscriptions',
  '0009_endpoint_health',
  '0010_delivery_log',
  '0011_audit',
  '0012_rate_limit',
  '0013_disabled_retention',
  '0014_backfill',
  '0015_trace_context',
  '0016_backfill_every_holder',
  '0017_single_subscription_claim',
  '0018_read_by_key',
  '0019_isolated_takeovers',
  '0020_revoke_public_execute',
  '0021_inline_type_match',
]

/** Drops every overload of a schema's function, as a schema that an older release made lacks them. */
async function dropFunction(db: Kysely<any>, schema: string, name: string): Promise<void> {
  const { rows } = await sql<{ signature: string }>`
    SELECT p.oid::regprocedure::text AS signature FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = ${schema} AND p.proname = ${name}`.execute(db)
  for (const { signature } of rows) await sql.raw(`DROP FUNCTION ${signature}`).execute(db)
}

/** Takes 0008 (subscriptions) back out of a schema, as the release before it left the schema. */
async function rollBackSubscriptions(db: Kysely<any>, schema: string): Promise<void> {
  for (const name of [
    'outbox_insert_deliveries',
    'outbox_type_matches',
    'outbox_claim_single_subscription_lanes',
  ])
    await dropFunction(db, schema, name)
  await sql
    .raw(`
      DROP FUNCTION ${schema}.outbox_enqueue(uuid, text, text, text, jsonb, integer, text, text);
      DROP FUNCTION ${schema}.outbox_claim_lanes(uuid[], integer[], integer, bigint, integer, integer, bigint);
      DROP FUNCTION ${schema}.outbox_claim_subscription_lanes(uuid[], integer[], integer, bigint, integer, integer, bigint);
      DROP TABLE ${schema}.outbox_subscription_secret, ${schema}.outbox_subscription;
      ALTER TABLE ${schema}.outbox DROP COLUMN subscription_id, DROP COLUMN tenant;
      ALTER TABLE ${schema}.outbox_lane DROP COLUMN subscription_id;
      ALTER TABLE ${schema}.outbox_lane ADD PRIMARY KEY (aggregate_type, aggregate_id);
      DELETE FROM ${schema}.outbox_producer_migration WHERE name >= '0008';`)
    .execute(db)
}

/** Every producer table, column, index and constraint of a schema, as the catalog describes them. */
async function describeSchema(db: Kysely<any>, schema: string) {
  const { rows: columns } = await sql<{ line: string }>`
    SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
           coalesce(column_default, '') AS line
    FROM information_schema.columns WHERE table_schema = ${schema} AND table_name = ANY(${PRODUCER_TABLES})
    ORDER BY table_name, column_name`.execute(db)
  const { rows: indexes } = await sql<{ line: string }>`
    SELECT tablename || ' ' || replace(indexdef, ${`${schema}.`}, '') AS line
    FROM pg_indexes WHERE schemaname = ${schema} AND tablename = ANY(${PRODUCER_TABLES}) ORDER BY indexname`.execute(
    db,
  )
  const { rows: constraints } = await sql<{ line: string }>`
    SELECT c.conrelid::regclass::text || ' ' || pg_get_constraintdef(c.oid) AS line
    FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace JOIN pg_class r ON r.oid = c.conrelid
    WHERE n.nspname = ${schema} AND r.relname = ANY(${PRODUCER_TABLES}) ORDER BY 1`.execute(db)
  const strip = (line: string) => line.replaceAll(`${schema}.`, '')
  return {
    columns: columns.map((row) => row.line),
    indexes: indexes.map((row) => strip(row.line)),
    constraints: constraints.map((row) => strip(row.line)),
  }
}

async function tableNames(db: Kysely<any>, schema: string): Promise<string[]> {
  const { rows } = await sql<{ name: string }>`
    SELECT table_name AS name FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY 1`.execute(
    db,
  )
  return rows.map((row) => row.name)
}

async function migrationRows(db: Kysely<any>, schema: string) {
  return await db
    .withSchema(schema)
    .selectFrom(PRODUCER_MIGRATION_TABLE)
    .selectAll()
    .orderBy('name')
    .execute()
}

describe('migrate', () => {
  it('is a no-op the second (and third) time: no error, same migration rows, same schema', async () => {
    const before = await migrationRows(t.db, 'public')
    expect(before.map((row) => row.name)).toEqual(PRODUCER_MIGRATIONS)
    const shape = await describeSchema(t.db, 'public')
    await migrate(t.db)
    await migrate(t.db, { schema: 'public' })
    expect(await migrationRows(t.db, 'public')).toEqual(before)
    expect(await describeSchema(t.db, 'public')).toEqual(shape)
  })

  it('creates the outbox, counter and lane tables with the pending index', async () => {
    const shape = await describeSchema(t.db, 'public')
    const tables = new Set(shape.columns.map((line) => line.split('.')[0]))
    expect([...tables].sort()).toEqual([...PRODUCER_TABLES].sort())
    expect(shape.indexes.join('\n')).toMatch(
      /outbox_pending_lane_idx .*\(subscription_id, aggregate_type, aggregate_id, sequence\).*WHERE \(status = 'pending'::text\)/,
    )
    expect(shape.indexes.join('\n')).toMatch(
      /outbox_delivery_sequence_idx ON outbox USING btree \(subscription_id, aggregate_type, aggregate_id, sequence\)/,
    )
    expect(shape.indexes.join('\n')).toMatch(
      /outbox_event_subscription_idx ON outbox USING btree \(event_id, subscription_id\)/,
    )
    expect(shape.constraints).toContain('outbox_counter PRIMARY KEY (aggregate_type, aggregate_id)')
    expect(shape.constraints).toContain(
      'outbox_lane PRIMARY KEY (subscription_id, aggregate_type, aggregate_id)',
    )
  })

  it('upgrades a schema made by an earlier version, and owner writes then find lanes by claim token', async () => {
    // A schema as the first release left it: only 0001 applied, no claim-token index.
    await migrate(t.db, { schema: 'tenant_old' })
    await sql`DROP INDEX tenant_old.outbox_lane_claim_token_idx`.execute(t.db)
    await sql`DELETE FROM tenant_old.outbox_producer_migration WHERE name <> '0001_outbox'`.execute(t.db)

    await migrate(t.db, { schema: 'tenant_old' })
    expect((await migrationRows(t.db, 'tenant_old')).map((row) => row.name)).toEqual(PRODUCER_MIGRATIONS)
    expect(await describeSchema(t.db, 'tenant_old')).toEqual(await describeSchema(t.db, 'public'))

    // With many lanes (they are never pruned), finding one by its token must not scan them all.
    await sql`
      INSERT INTO tenant_old.outbox_lane (aggregate_type, aggregate_id, claim_token, leased_until)
      SELECT 'order', n::text, CASE WHEN n % 100 = 0 THEN gen_random_uuid() END,
             CASE WHEN n % 100 = 0 THEN now() + interval '1 minute' END
      FROM generate_series(1, 20000) n`.execute(t.db)
    await sql`ANALYZE tenant_old.outbox_lane`.execute(t.db)
    const { rows } = await sql<{ 'QUERY PLAN': string }>`
      EXPLAIN UPDATE tenant_old.outbox_lane SET claim_token = NULL, leased_until = NULL
      WHERE claim_token = ${'00000000-0000-4000-8000-000000000000'}::uuid`.execute(t.db)
    const plan = rows.map((row) => row['QUERY PLAN']).join('\n')
    expect(plan).toContain('outbox_lane_claim_token_idx')
    expect(plan).not.toContain('Seq Scan')
  })

  it('enqueue on a schema not yet migrated to this version says to migrate, and works once it is', async () => {
    await migrate(t.db, { schema: 'tenant_stale' })
    // As the second release left it: no enqueue functions (nor anything later).
    for (const name of [
      'outbox_enqueue',
      'outbox_new_row_due',
      'outbox_claim_lanes',
      'outbox_insert_deliveries',
    ]) {
      await dropFunction(t.db, 'tenant_stale', name)
    }
    await sql`DELETE FROM tenant_stale.outbox_producer_migration WHERE name >= '0003'`.execute(t.db)
    const event = { aggregateType: 'order', aggregateId: '1', eventType: 'order.created', payload: {} }
    const writes: ((trx: Transaction<any>) => Promise<unknown>)[] = [
      (trx) => enqueue(trx, event, { schema: 'tenant_stale' }),
      (trx) => enqueueMany(trx, [event], { schema: 'tenant_stale' }),
    ]
    for (const write of writes) {
      await expect(t.db.transaction().execute(write)).rejects.toMatchObject({
        code: 'ERR_OUTBOX_SCHEMA_OUTDATED',
        message: expect.stringContaining('outbox migrate'),
      })
    }
    await migrate(t.db, { schema: 'tenant_stale' })
    const result = await t.db.transaction().execute((trx) => enqueue(trx, event, { schema: 'tenant_stale' }))
    expect(result.sequence).toBe(1)
  })

  it('every writer on a schema left at migration 0006 says to migrate, and works once it is', async () => {
    await migrate(t.db, { schema: 'tenant_0006' })
    // As the release before 0007 left it: no subscriptions, no payload sizes, no takeover watch, no seven-argument
    // enqueue or five-argument claim.
    await rollBackSubscriptions(t.db, 'tenant_0006')
    await sql`DROP FUNCTION tenant_0006.outbox_enqueue(uuid, text, text, text, jsonb, integer, text)`.execute(
      t.db,
    )
    await sql`DROP FUNCTION tenant_0006.outbox_claim_lanes(integer, bigint, integer, integer, bigint)`.execute(
      t.db,
    )
    await sql`ALTER TABLE tenant_0006.outbox DROP COLUMN first_failed_at, DROP COLUMN payload_bytes`.execute(
      t.db,
    )
    await sql`ALTER TABLE tenant_0006.outbox_lane DROP COLUMN watch_starts, DROP COLUMN started_token`.execute(
      t.db,
    )
    await sql`DELETE FROM tenant_0006.outbox_producer_migration WHERE name >= '0007'`.execute(t.db)
    const event = { aggregateType: 'order', aggregateId: '1', eventType: 'order.created', payload: {} }
    const outdated = {
      code: 'ERR_OUTBOX_SCHEMA_OUTDATED',
      message: expect.stringContaining('outbox migrate'),
    }
    await expect(
      t.db.transaction().execute((trx) => enqueue(trx, event, { schema: 'tenant_0006' })),
    ).rejects.toMatchObject(outdated)
    await expect(
      t.db.transaction().execute((trx) => enqueueMany(trx, [event], { schema: 'tenant_0006' })),
    ).rejects.toMatchObject(outdated)
    const relay = new Relay({ db: t.db, schema: 'tenant_0006', endpoint: 'http://127.0.0.1:9/hooks' })
    await expect(relay.runOnce()).rejects.toMatchObject(outdated)
    await migrate(t.db, { schema: 'tenant_0006' })
    const [enqueued] = await t.db
      .transaction()
      .execute((trx) => enqueueMany(trx, [event], { schema: 'tenant_0006' }))
    expect(enqueued!.sequence).toBe(1)
  })

  it('a relay on a schema not yet migrated to this version says to migrate, and claims once it is', async () => {
    await migrate(t.db, { schema: 'tenant_stale_relay' })
    await dropFunction(t.db, 'tenant_stale_relay', 'outbox_claim_lanes')
    await dropFunction(t.db, 'tenant_stale_relay', 'outbox_claim_subscription_lanes')
    await dropFunction(t.db, 'tenant_stale_relay', 'outbox_claim_single_subscription_lanes')
    // As the third release left it: neither the claim function nor anything later.
    await sql`DELETE FROM tenant_stale_relay.outbox_producer_migration WHERE name >= '0004'`.execute(t.db)
    // Nothing is pending, so the endpoint is never called: only the claim runs.
    const relay = new Relay({ db: t.db, schema: 'tenant_stale_relay', endpoint: 'http://127.0.0.1:9/hooks' })
    await expect(relay.runOnce()).rejects.toMatchObject({
      code: 'ERR_OUTBOX_SCHEMA_OUTDATED',
      message: expect.stringContaining('outbox migrate'),
    })
    await migrate(t.db, { schema: 'tenant_stale_relay' })
    expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
  })

  it('works end to end in a custom schema and leaves public untouched', async () => {
    const publicBefore = await describeSchema(t.db, 'public')
    const publicTables = await tableNames(t.db, 'public')
    const publicMigrations = await migrationRows(t.db, 'public')

    await migrate(t.db, { schema: 'tenant_a' })
    await migrate(t.db, { schema: 'tenant_a' })
    expect((await migrationRows(t.db, 'tenant_a')).map((row) => row.name)).toEqual(PRODUCER_MIGRATIONS)

    const options = { schema: 'tenant_a' }
    const results = await t.db.transaction().execute(async (trx) => [
      await enqueue(
        trx,
        { aggregateType: 'order', aggregateId: '1', eventType: 'order.created', payload: { n: 1 } },
        options,
      ),
      ...(await enqueueMany(
        trx,
        [
          { aggregateType: 'order', aggregateId: '1', eventType: 'order.paid', payload: { n: 2 } },
          { aggregateType: 'order', aggregateId: '2', eventType: 'order.created', payload: { n: 3 } },
        ],
        options,
      )),
    ])
    expect(results.map((result) => result.sequence)).toEqual([1, 2, 1])

    const rows = await t.db
      .withSchema('tenant_a')
      .selectFrom('outbox')
      .select(['event_id', 'sequence'])
      .execute()
    expect(rows.map((row) => row.event_id).sort()).toEqual(results.map((result) => result.eventId).sort())
    expect(await stats(t.db, options)).toMatchObject({ pending: 3, dead: 0, blocked: 0 })
    expect(await prune(t.db, { ...options, retention: 0 })).toEqual({
      removed: 0,
      dropped: 0,
      caughtUp: true,
    })

    // Nothing leaked into public: no rows, same tables, same migrations.
    expect(await stats(t.db)).toMatchObject({ pending: 0 })
    const { rows: publicCounts } = await sql<{ n: string }>`
      SELECT (SELECT count(*) FROM public.outbox) + (SELECT count(*) FROM public.outbox_counter)
           + (SELECT count(*) FROM public.outbox_lane) AS n`.execute(t.db)
    expect(publicCounts[0]!.n).toBe('0')
    expect(await describeSchema(t.db, 'public')).toEqual(publicBefore)
    expect(await tableNames(t.db, 'public')).toEqual(publicTables)
    expect(await migrationRows(t.db, 'public')).toEqual(publicMigrations)
    expect(await tableNames(t.db, 'tenant_a')).toEqual([...PRODUCER_TABLES].sort())
    expect(await describeSchema(t.db, 'tenant_a')).toEqual(publicBefore)
  })

  it('exports SQL that builds the same schema as migrate', async () => {
    await migrate(t.db, { schema: 'tenant_m' })
    await sql.raw(producerMigrationSql({ schema: 'tenant_s' })).execute(t.db)
    const migrated = await describeSchema(t.db, 'tenant_m')
    const fromSql = await describeSchema(t.db, 'tenant_s')
    const withoutBookkeeping = (lines: string[]) =>
      lines.filter((line) => !line.includes(PRODUCER_MIGRATION_TABLE))
    expect(withoutBookkeeping(fromSql.columns)).toEqual(withoutBookkeeping(migrated.columns))
    expect(fromSql.indexes).toEqual(withoutBookkeeping(migrated.indexes))
    expect(fromSql.constraints).toEqual(withoutBookkeeping(migrated.constraints))
    // The exported SQL is itself re-runnable.
    await sql.raw(producerMigrationSql({ schema: 'tenant_s' })).execute(t.db)
    expect(producerMigrationSql()).toContain('CREATE SCHEMA IF NOT EXISTS "public"')
  })

  it('runs from several processes at once without error, even on a fresh schema', async () => {
    const pools = Array.from({ length: 4 }, () => t.connect({ max: 2 }))
    // Racing first-time migrations fail only sometimes, so race several fresh schemas.
    for (let round = 0; round < 6; round++) {
      const schema = `tenant_race_${round}`
      await Promise.all(pools.map((db) => migrate(db, { schema })))
      expect((await migrationRows(t.db, schema)).map((row) => row.name)).toEqual(PRODUCER_MIGRATIONS)
    }
  })

  it("the README's uninstall statements leave no producer table or function behind", async () => {
    await migrate(t.db, { schema: 'tenant_gone' })
    await t.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL search_path TO tenant_gone`.execute(trx)
      // As the README's "Migrations go forward only" gives them: keep the two in step.
      await sql`DROP FUNCTION IF EXISTS
        outbox_claim_single_subscription_lanes(uuid, integer, integer, bigint, integer, integer, bigint),
        outbox_claim_subscription_lanes(uuid[], integer[], integer, bigint, integer, integer, bigint),
  outbox_claim_lanes(uuid[], integer[], integer, bigint, integer, integer, bigint),
        outbox_claim_lanes(integer, bigint, integer, integer, bigint),
        outbox_claim_lanes(integer, bigint, integer, integer),
        outbox_enqueue(uuid, text, text, text, jsonb, integer, text, text, text),
        outbox_enqueue(uuid, text, text, text, jsonb, integer, text, text),
        outbox_enqueue(uuid, text, text, text, jsonb, integer, text),
        outbox_enqueue(uuid, text, text, text, jsonb, text),
        outbox_insert_deliveries(uuid, text, text, bigint, text, jsonb, integer, text),
        outbox_type_matches(text[], text),
        outbox_new_row_due(text, text),
        outbox_backfill_batch(uuid, integer, integer, integer)`.execute(trx)
      await sql`DROP TABLE IF EXISTS outbox, outbox_counter, outbox_lane, outbox_subscription_secret, outbox_subscription,
        outbox_delivery_attempt, outbox_audit, outbox_producer_migration, outbox_producer_migration_lock`.execute(
        trx,
      )
    })
    // Tables, indexes, sequences, functions and types: nothing of the producer's is left in the schema.
    const { rows } = await sql<{ objects: string }>`
      SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'tenant_gone'::regnamespace)
           + (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'tenant_gone'::regnamespace)
           + (SELECT count(*) FROM pg_type y WHERE y.typnamespace = 'tenant_gone'::regnamespace) AS objects`.execute(
      t.db,
    )
    expect(rows[0]!.objects).toBe('0')
  })

  it('refuses a schema name that is not a plain lower-case identifier', async () => {
    for (const schema of ['Tenant', 'tenant-a', 'a"; DROP SCHEMA public; --', '', '1abc']) {
      await expect(migrate(t.db, { schema })).rejects.toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION' })
      expect(() => producerMigrationSql({ schema })).toThrow(/schema must be a lower-case SQL identifier/)
    }
  })
})
