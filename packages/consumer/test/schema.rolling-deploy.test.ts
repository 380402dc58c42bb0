import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import { CompiledQuery, type Kysely, sql } from 'kysely'
import { Migrator } from 'kysely/migration'
import { beforeAll, describe, expect, it } from 'vitest'
import { initialCursor } from '../src/cursor.js'
import {
  CONSUMER_MIGRATION_LOCK_TABLE,
  CONSUMER_MIGRATION_TABLE,
  createConsumer,
  migrate,
} from '../src/index.js'
import { consumerMigrations } from '../src/migrations/index.js'
import { createEffects, delivery, makeEvent, quiet, writeEffect } from './support.js'

/**
 * A rolling deploy: the schema is migrated by the new version while consumers of the previous one still run. The
 * previous version's statements are copied here as it sent them (8d35d63: sql/record-event.ts, sql/lock-cursor.ts,
 * sql/insert-processed-event.ts, all qualified with the schema, which that version always resolved).
 */
const SCHEMA = 'rolling'
const OLD_RECORD_EVENT = `select "${SCHEMA}"."outbox_record_event"($1, $2, $3, $4, $5, $6, $7, $8) as result`
const OLD_LOCK_CURSOR = `select "last_sequence" from "${SCHEMA}"."consumer_cursors" where "aggregate_type" = $1 and "aggregate_id" = $2 for update`
const OLD_INSERT_PROCESSED = `insert into "${SCHEMA}"."processed_events" ("event_id", "aggregate_type", "aggregate_id", "sequence", "type") values ($1, $2, $3, $4, $5) on conflict ("event_id") do nothing`

const t = useTestDatabase()

/** The previous version's transaction for one event under 'monotonic', on its own pool (its own process). */
function previousConsumer(db: Kysely<any>) {
  return async (event: OutboxEvent<unknown>): Promise<string> =>
    await db
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (trx) => {
        const initial = initialCursor('monotonic', 1, event.sequence)
        const { rows } = await trx.executeQuery<{ result: string }>(
          CompiledQuery.raw(OLD_RECORD_EVENT, [
            event.eventId,
            event.aggregateType,
            event.aggregateId,
            event.sequence,
            event.type,
            'monotonic',
            '1',
            initial,
          ]),
        )
        const result = rows[0]?.result
        if (result === 'duplicate') return 'duplicate_ignored'
        if (result === 'held') {
          const cursor = await trx.executeQuery<{ last_sequence: string }>(
            CompiledQuery.raw(OLD_LOCK_CURSOR, [event.aggregateType, event.aggregateId]),
          )
          return `stale_ignored at ${cursor.rows[0]?.last_sequence}`
        }
        await writeEffect(trx, event)
        return 'applied'
      })
}

/** The new version, source 'default' (the one the migration gave existing rows), on the shared pool. */
function currentConsumer() {
  const consumer = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, schema: SCHEMA })
  const handle = consumer.handle(async (event, trx) => writeEffect(trx, event))
  return async (event: OutboxEvent<unknown>): Promise<string> => {
    const { body, headers } = delivery(event)
    const answer = await handle({ method: 'POST', headers, body: new TextEncoder().encode(body) })
    const parsed = JSON.parse(answer.body) as { status?: string; code?: string }
    return parsed.status ?? `${answer.status} ${parsed.code}`
  }
}

async function effectsOf(aggregateId: string): Promise<number[]> {
  const rows = await t.db
    .selectFrom('effects')
    .select('sequence')
    .where('aggregate_id', '=', aggregateId)
    .orderBy('sequence')
    .execute()
  return rows.map((row) => Number(row.sequence))
}

async function cursorsOf(aggregateId: string) {
  return await t.db
    .withSchema(SCHEMA)
    .selectFrom('consumer_cursors')
    .select(['source', 'last_sequence'])
    .where('aggregate_id', '=', aggregateId)
    .execute()
}

const seq = (aggregateId: string, sequence: number) => makeEvent({ aggregateId, sequence })

let previous: (event: OutboxEvent<unknown>) => Promise<string>
const before = { kept: seq('kept', 1), keptUpper: seq('kept', 2) }

beforeAll(async () => {
  await createEffects(t.db)
  // The schema as the previous version left it: migrations 0001 and 0002, recorded by Kysely's Migrator.
  const migrator = new Migrator({
    db: t.db,
    provider: {
      getMigrations: async () =>
        Object.fromEntries(
          consumerMigrations
            .slice(0, 2)
            .map((migration) => [
              migration.name,
              { up: async (db: Kysely<any>) => void (await sql.raw(migration.sql(SCHEMA)).execute(db)) },
            ]),
        ),
    },
    migrationTableName: CONSUMER_MIGRATION_TABLE,
    migrationLockTableName: CONSUMER_MIGRATION_LOCK_TABLE,
    migrationTableSchema: SCHEMA,
  })
  const { error } = await migrator.migrateToLatest()
  if (error !== undefined) throw error
  previous = previousConsumer(t.connect({ max: 4 }))
  // Rows written before the migration, one of them by an id in upper case (the uuid column stored it lower case).
  expect(await previous(before.kept)).toBe('applied')
  expect(await previous({ ...before.keptUpper, eventId: before.keptUpper.eventId.toUpperCase() })).toBe(
    'applied',
  )
  await migrate(t.db, { schema: SCHEMA })
})

describe('a consumer of the previous version, against the schema migrated by this one', () => {
  it('kept every row, under the default source, with its id as lower-case text', async () => {
    const rows = await t.db
      .withSchema(SCHEMA)
      .selectFrom('processed_events')
      .select(['source', 'event_id', 'sequence'])
      .orderBy('sequence')
      .execute()
    expect(rows).toEqual([
      { source: 'default', event_id: before.kept.eventId, sequence: '1' },
      { source: 'default', event_id: before.keptUpper.eventId, sequence: '2' },
    ])
    expect(await cursorsOf('kept')).toEqual([{ source: 'default', last_sequence: '2' }])
    // What was recorded before the migration is a duplicate to the new version, and to the previous one.
    const current = currentConsumer()
    expect(await current(before.kept)).toBe('duplicate_ignored')
    expect(await current(before.keptUpper)).toBe('duplicate_ignored')
    expect(await previous(before.keptUpper)).toBe('duplicate_ignored')
    expect(await effectsOf('kept')).toEqual([1, 2])
  })

  it('keeps applying, deduping and ordering through the wrapper, side by side with the new version', async () => {
    const current = currentConsumer()
    // Every event reaches both versions at once, on separate pools: exactly one applies it.
    for (let sequence = 1; sequence <= 12; sequence++) {
      const event = seq('side-by-side', sequence)
      const answers = await Promise.all([previous(event), current(event)])
      expect(answers.sort(), `sequence ${sequence}`).toEqual(['applied', 'duplicate_ignored'])
    }
    expect(await effectsOf('side-by-side')).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    expect(await cursorsOf('side-by-side')).toEqual([{ source: 'default', last_sequence: '12' }])

    // One cursor for both: an older unseen event is stale to either version.
    expect(await previous(seq('side-by-side', 3))).toBe('stale_ignored at 12')
    expect(await current(seq('side-by-side', 4))).toBe('stale_ignored')
    expect(await previous(seq('side-by-side', 13))).toBe('applied')
    expect(await current(seq('side-by-side', 14))).toBe('applied')
    expect(await cursorsOf('side-by-side')).toEqual([{ source: 'default', last_sequence: '14' }])
  })

  it("cannot run the previous version's plain insert (sequence: 'off'): refused with 42P10, nothing recorded", async () => {
    // ON CONFLICT (event_id) needs a unique index on event_id alone, which sources rule out: such a consumer
    // answers 500 (the sender retries) until it is upgraded, as the README's upgrade section says.
    const event = seq('off-previous', 1)
    const insert = t.db.executeQuery(
      CompiledQuery.raw(OLD_INSERT_PROCESSED, [
        event.eventId,
        event.aggregateType,
        event.aggregateId,
        event.sequence,
        event.type,
      ]),
    )
    await expect(insert).rejects.toMatchObject({ code: '42P10' })
    const rows = await t.db
      .withSchema(SCHEMA)
      .selectFrom('processed_events')
      .select('event_id')
      .where('event_id', '=', event.eventId)
      .execute()
    expect(rows).toEqual([])
  })
})
