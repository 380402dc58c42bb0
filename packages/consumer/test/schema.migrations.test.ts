import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import request from 'supertest'
import { describe, expect, it } from 'vitest'
import {
  CONSUMER_MIGRATION_LOCK_TABLE,
  CONSUMER_MIGRATION_TABLE,
  consumerMigrationSql,
  createConsumer,
  migrate,
  migrationSql,
  OutboxError,
} from '../src/index.js'
import { migration0004 } from '../src/migrations/0004-payload-digest.js'
import {
  appWith,
  countRows,
  cursorOf,
  delivery,
  makeEvent,
  quiet,
  recordingLogger,
  refusalRecorder,
} from './support.js'

const t = useTestDatabase()

async function tablesIn(schema: string): Promise<string[]> {
  const { rows } = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY table_name
  `.execute(t.db)
  return rows.map((row) => row.table_name)
}

async function columnsOf(schema: string, table: string): Promise<string[]> {
  const { rows } = await sql<{ column: string }>`
    SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS column
    FROM information_schema.columns WHERE table_schema = ${schema} AND table_name = ${table} ORDER BY column_name
  `.execute(t.db)
  return rows.map((row) => row.column)
}

/** The consumer's functions in a schema, with their arguments and body (the schema's name taken out). */
async function functionsOf(schema: string): Promise<string[]> {
  const { rows } = await sql<{ fn: string }>`
    SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || p.prosrc AS fn
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = ${schema} AND p.proname LIKE 'outbox\\_record\\_%' ORDER BY fn
  `.execute(t.db)
  return rows.map((row) => row.fn.replaceAll(`"${schema}".`, ''))
}

async function indexesOf(schema: string, table: string): Promise<string[]> {
  const { rows } = await sql<{ indexdef: string }>`
    SELECT indexdef FROM pg_indexes WHERE schemaname = ${schema} AND tablename = ${table} ORDER BY indexname
  `.execute(t.db)
  return rows.map((row) => row.indexdef.replaceAll(`${schema}.`, ''))
}

describe('migrate', () => {
  it('lives side by side with the producer in one database, each with its own migration table', async () => {
    const tables = await tablesIn('public')
    expect(tables).toEqual(
      expect.arrayContaining([
        'processed_events',
        'consumer_cursors',
        CONSUMER_MIGRATION_TABLE,
        CONSUMER_MIGRATION_LOCK_TABLE,
        'outbox_producer_migration',
        'outbox_producer_migration_lock',
        'outbox',
      ]),
    )
    const consumerRuns = await t.db.selectFrom(CONSUMER_MIGRATION_TABLE).select('name').execute()
    const producerRuns = await t.db.selectFrom('outbox_producer_migration').select('name').execute()
    expect(consumerRuns.map((run) => run.name)).toEqual([
      '0001_processed_events_and_cursors',
      '0002_record_event_function',
      '0003_source_keys',
      '0004_payload_digest',
      '0005_record_event_statements',
    ])
    expect(producerRuns.length).toBeGreaterThan(0)
    // neither package's bookkeeping mentions the other's migrations
    for (const run of producerRuns) expect(consumerRuns.map((c) => c.name)).not.toContain(run.name)
  })

  it('is a no-op the second time and keeps data', async () => {
    await t.db
      .insertInto('processed_events')
      .values({
        event_id: makeEvent().eventId,
        aggregate_type: 'order',
        aggregate_id: 'keep',
        sequence: 1,
        type: 't',
      })
      .execute()
    const before = await t.db.selectFrom(CONSUMER_MIGRATION_TABLE).selectAll().execute()
    await migrate(t.db)
    await migrate(t.db)
    const after = await t.db.selectFrom(CONSUMER_MIGRATION_TABLE).selectAll().execute()
    expect(after).toEqual(before)
    expect(await countRows(t.db, 'processed_events')).toBe(1)
    await t.db.deleteFrom('processed_events').execute()
  })

  it('creates everything in a custom schema, where a consumer then works apart from public', async () => {
    await Promise.all([
      migrate(t.db, { schema: 'hooks' }),
      migrate(t.connect({ max: 2 }), { schema: 'hooks' }),
    ])
    expect(await tablesIn('hooks')).toEqual(
      [
        CONSUMER_MIGRATION_TABLE,
        CONSUMER_MIGRATION_LOCK_TABLE,
        'consumer_cursors',
        'processed_events',
      ].sort(),
    )
    // The new signature, 0003's (kept for the previous version) and 0002's (kept as a wrapper for the one before).
    expect((await functionsOf('hooks')).map((fn) => fn.slice(0, fn.indexOf(')') + 1))).toEqual([
      'outbox_record_event(p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text, p_policy text, p_first_sequence text, p_initial_cursor bigint)',
      'outbox_record_event(p_source text, p_event_id text, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text, p_policy text, p_first_sequence text, p_initial_cursor bigint)',
      'outbox_record_event(p_source text, p_event_id text, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text, p_policy text, p_first_sequence text, p_initial_cursor bigint, p_digest text)',
    ])

    const { dedupe } = createConsumer({
      db: t.db,
      allowUnsigned: true,
      schema: 'hooks',
      logger: quiet,
      sequence: 'strict',
    })
    const app = appWith(dedupe(async () => {}))
    const event = makeEvent({ aggregateId: 'in-hooks' })
    const { body, headers } = delivery(event)
    expect((await request(app).post('/hooks').set(headers).send(body)).body.status).toBe('applied')
    expect(await countRows(t.db.withSchema('hooks'), 'processed_events')).toBe(1)
    expect(await cursorOf(t.db, 'order', 'in-hooks', 'hooks')).toBe(1)
    expect(await countRows(t.db, 'processed_events')).toBe(0)
    expect(await cursorOf(t.db, 'order', 'in-hooks')).toBeUndefined()
  })

  it('refuses a bad schema option with a clear error', async () => {
    await expect(migrate(t.db, { schema: '' })).rejects.toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION' })
  })

  it('reports a failing migration as ERR_OUTBOX_MIGRATION_FAILED with the cause', async () => {
    // a table squatting the name, with an incompatible shape, makes the CREATE INDEX fail
    await sql`CREATE SCHEMA squat`.execute(t.db)
    await sql`CREATE TABLE squat.processed_events (something int)`.execute(t.db)
    const error = await migrate(t.db, { schema: 'squat' }).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(OutboxError)
    expect((error as OutboxError).code).toBe('ERR_OUTBOX_MIGRATION_FAILED')
    expect((error as OutboxError).cause).toBeDefined()
  })

  it("the README's uninstall statements leave no consumer table or function behind", async () => {
    await migrate(t.db, { schema: 'gone' })
    await t.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL search_path TO gone`.execute(trx)
      // As the README's "Migrations go forward only" gives them: keep the two in step.
      await sql`DROP FUNCTION IF EXISTS outbox_record_event(uuid, text, text, bigint, text, text, text, bigint)`.execute(
        trx,
      )
      await sql`DROP FUNCTION IF EXISTS outbox_record_event(text, text, text, text, bigint, text, text, text, bigint)`.execute(
        trx,
      )
      await sql`DROP FUNCTION IF EXISTS outbox_record_event(text, text, text, text, bigint, text, text, text, bigint, text)`.execute(
        trx,
      )
      await sql`DROP TABLE IF EXISTS processed_events, consumer_cursors, outbox_consumer_migration, outbox_consumer_migration_lock`.execute(
        trx,
      )
    })
    // Tables, indexes, sequences, functions and types: nothing of the consumer's is left in the schema.
    const { rows } = await sql<{ objects: string }>`
      SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'gone'::regnamespace)
           + (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'gone'::regnamespace)
           + (SELECT count(*) FROM pg_type y WHERE y.typnamespace = 'gone'::regnamespace) AS objects`.execute(
      t.db,
    )
    expect(rows[0]!.objects).toBe('0')
  })
})

describe('consumerMigrationSql', () => {
  it('creates the same tables and indexes as migrate, and can run twice', async () => {
    const script = consumerMigrationSql({ schema: 'by_sql' })
    expect(script).toContain('create schema if not exists "by_sql"')
    await sql.raw(script).execute(t.db)
    await sql.raw(script).execute(t.db)
    for (const table of ['processed_events', 'consumer_cursors']) {
      expect(await columnsOf('by_sql', table)).toEqual(await columnsOf('public', table))
      expect(await indexesOf('by_sql', table)).toEqual(await indexesOf('public', table))
    }
    expect(await functionsOf('by_sql')).toEqual(await functionsOf('public'))
    expect(await functionsOf('by_sql')).toHaveLength(3)
    expect(await tablesIn('by_sql')).not.toContain(CONSUMER_MIGRATION_TABLE)
  })

  it("qualifies every name with the schema, 'public' by default", () => {
    expect(consumerMigrationSql()).toContain('create table if not exists "public"."processed_events"')
    expect(consumerMigrationSql({ schema: 'webhooks' })).toContain('"webhooks"."processed_events"')
    expect(consumerMigrationSql({ schema: 'webhooks' })).toContain(
      'FUNCTION "webhooks"."outbox_record_event"(',
    )
  })

  it('refuses a schema name that is not a lower-case identifier (quotes, dollar-quote tags, capitals)', () => {
    for (const schema of ['we"ird', 'odd"$fn$', 'Webhooks', '']) {
      expect(() => consumerMigrationSql({ schema }), schema).toThrow(
        expect.objectContaining({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'schema' }),
      )
    }
  })

  it('is still exported under its deprecated name, migrationSql', () => {
    expect(migrationSql).toBe(consumerMigrationSql)
    expect(migrationSql({ schema: 'by_sql' })).toBe(consumerMigrationSql({ schema: 'by_sql' }))
  })
})

describe('a schema migrated by an older consumer (no outbox_record_event taking a digest)', () => {
  it('answers 500 without internals, tells the logger and onError to migrate, and works once migrated', async () => {
    await migrate(t.db, { schema: 'old' })
    await sql`DROP FUNCTION old.outbox_record_event(text, text, text, text, bigint, text, text, text, bigint, text)`.execute(
      t.db,
    )
    await sql`DELETE FROM old.outbox_consumer_migration WHERE name IN ('0004_payload_digest', '0005_record_event_statements')`.execute(
      t.db,
    )
    const logger = recordingLogger()
    const { refusals, onError } = refusalRecorder()
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, schema: 'old', logger, onError })
    const app = appWith(dedupe(async () => {}))
    const event = makeEvent({ aggregateId: 'outdated' })
    const { body, headers } = delivery(event)

    const answer = await request(app).post('/hooks').set(headers).send(body)
    expect(answer.status).toBe(500)
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(answer.body).toMatchObject({ code: 'handler_failed', status: 500 })
    expect(answer.text).not.toMatch(/outbox_record_event|migrat|OutboxError|ERR_OUTBOX|\bat .*:\d+:\d+/)

    const cause = refusals[0]?.cause
    expect(cause).toBeInstanceOf(OutboxError)
    expect((cause as OutboxError).code).toBe('ERR_OUTBOX_SCHEMA_OUTDATED')
    const logged = logger.lines.find((line) => line.level === 'error')
    expect(logged?.meta?.error).toMatchObject({ code: 'ERR_OUTBOX_SCHEMA_OUTDATED' })
    const message = String((logged?.meta?.error as { message?: unknown } | undefined)?.message)
    expect(message).toContain("run the consumer's migrations")
    expect(message).toContain('migrate(db, { schema: "old" })')
    expect(await countRows(t.db.withSchema('old'), 'processed_events')).toBe(0)

    await migrate(t.db, { schema: 'old' })
    const again = await request(app).post('/hooks').set(headers).send(body)
    expect(again.body.status).toBe('applied')
    expect(await cursorOf(t.db, 'order', 'outdated', 'old')).toBe(1)
  })
})

describe("a schema migrated before 0005 (its outbox_record_event does not know sequence 'off')", () => {
  it("answers an 'off' consumer's deliveries 500, says to migrate, and applies them once migrated", async () => {
    await migrate(t.db, { schema: 'pre0005' })
    // The function as migration 0004 left it, and its bookkeeping without 0005.
    await sql.raw(migration0004('pre0005')).execute(t.db)
    await sql`DELETE FROM pre0005.outbox_consumer_migration WHERE name = '0005_record_event_statements'`.execute(
      t.db,
    )
    const { refusals, onError } = refusalRecorder()
    const { dedupe } = createConsumer({
      db: t.db,
      allowUnsigned: true,
      schema: 'pre0005',
      sequence: 'off',
      logger: quiet,
      onError,
    })
    const app = appWith(dedupe(async () => {}))
    const event = makeEvent({ aggregateId: 'unordered' })
    const { body, headers } = delivery(event)

    const answer = await request(app).post('/hooks').set(headers).send(body)
    expect(answer.status).toBe(500)
    const cause = refusals[0]?.cause
    expect((cause as OutboxError).code).toBe('ERR_OUTBOX_SCHEMA_OUTDATED')
    expect((cause as OutboxError).message).toContain("does not know sequence 'off'")
    expect(await countRows(t.db.withSchema('pre0005'), 'processed_events')).toBe(0)

    await migrate(t.db, { schema: 'pre0005' })
    const again = await request(app).post('/hooks').set(headers).send(body)
    expect(again.body.status).toBe('applied')
    expect(await countRows(t.db.withSchema('pre0005'), 'processed_events')).toBe(1)
    // 'off' keeps no cursor.
    expect(await cursorOf(t.db, 'order', 'unordered', 'pre0005')).toBeUndefined()
  })
})
