import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import request from 'supertest'
import { describe, expect, it } from 'vitest'
import {
  CONSUMER_MIGRATION_LOCK_TABLE,
  CONSUMER_MIGRATION_TABLE,
  createConsumer,
  migrate,
  migrationSql,
  OutboxError,
} from '../src/index.js'
import { appWith, countRows, cursorOf, delivery, makeEvent, quiet } from './support.js'

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
    expect(consumerRuns.map((run) => run.name)).toEqual(['0001_processed_events_and_cursors'])
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

    const { dedupe } = createConsumer({ db: t.db, schema: 'hooks', logger: quiet, sequence: 'strict' })
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
})

describe('migrationSql', () => {
  it('creates the same tables and indexes as migrate, and can run twice', async () => {
    const script = migrationSql({ schema: 'by_sql' })
    expect(script).toContain('create schema if not exists "by_sql"')
    await sql.raw(script).execute(t.db)
    await sql.raw(script).execute(t.db)
    for (const table of ['processed_events', 'consumer_cursors']) {
      expect(await columnsOf('by_sql', table)).toEqual(await columnsOf('public', table))
      expect(await indexesOf('by_sql', table)).toEqual(await indexesOf('public', table))
    }
    expect(await tablesIn('by_sql')).not.toContain(CONSUMER_MIGRATION_TABLE)
  })

  it('quotes the schema name as an identifier', () => {
    expect(migrationSql({ schema: 'we"ird' })).toContain('"we""ird"."processed_events"')
    expect(migrationSql()).toContain('create table if not exists "processed_events"')
  })
})
