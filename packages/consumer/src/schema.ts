import { type Generated, type Kysely, type RawBuilder, sql } from 'kysely'
import { type Migration, Migrator } from 'kysely/migration'
import { OutboxError } from './errors.js'
import { consumerMigrations } from './migrations/index.js'
import { checkDatabase, checkSchema } from './options.js'

/**
 * A row of `processed_events`: one event id a consumer `source` has recorded (applied or stale). The primary key
 * `(source, event_id)` is what makes a duplicate a no-op; another source may record the same id.
 *
 * @example
 * ```ts
 * import type { ProcessedEventsTable } from '@outbox/consumer'
 * type Column = keyof ProcessedEventsTable // 'source' | 'event_id' | 'aggregate_type' | …
 * ```
 */
export interface ProcessedEventsTable {
  /**
   * The consumer's `source` (migration 0003 gave existing rows `'default'`). The column has that default for the
   * previous version's statements during a rolling deploy; typed as required so every insert names its source.
   */
  source: string
  /** The sender's id as text: a UUID (lower case) from this project's relay, `evt_…` from Stripe, … */
  event_id: string
  /** NULL for a sender without aggregates (recorded under `sequence: 'off'`). */
  aggregate_type: string | null
  /** NULL for a sender without aggregates (recorded under `sequence: 'off'`). */
  aggregate_id: string | null
  /** bigint: pg returns it as a string; NULL for a sender without sequences. */
  sequence: string | number | null
  type: string
  received_at: Generated<Date>
  /**
   * sha256 (hex) of the event as its envelope reader produced it (type, aggregate, sequence, data), to tell a
   * retry from the same id with another payload; NULL for rows recorded before migration 0004.
   */
  payload_digest?: string | null
}

/**
 * A row of `consumer_cursors`: the highest sequence applied for one aggregate (type, id) of one consumer `source`.
 * It only grows, and it is never pruned.
 *
 * @example
 * ```ts
 * import type { ConsumerCursorsTable } from '@outbox/consumer'
 * const lastApplied = (row: Pick<ConsumerCursorsTable, 'last_sequence'>) => Number(row.last_sequence)
 * ```
 */
export interface ConsumerCursorsTable {
  /** The consumer's `source`, first column of the primary key `(source, aggregate_type, aggregate_id)`. */
  source: string
  aggregate_type: string
  aggregate_id: string
  /** bigint: pg returns it as a string; 0 means nothing applied yet. */
  last_sequence: string | number
  updated_at: Generated<Date>
}

/**
 * The consumer's tables, for typing a Kysely instance that reads them (e.g. an admin page).
 *
 * @example
 * ```ts
 * import { createPool } from '@outbox/consumer'
 * import type { ConsumerDatabase } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<ConsumerDatabase>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const cursors = await db.selectFrom('consumer_cursors').selectAll().execute()
 * ```
 */
export interface ConsumerDatabase {
  processed_events: ProcessedEventsTable
  consumer_cursors: ConsumerCursorsTable
}

/**
 * Kysely migration table of this package, apart from the producer's `outbox_producer_migration`.
 *
 * @example
 * ```ts
 * import { CONSUMER_MIGRATION_TABLE } from '@outbox/consumer'
 * console.log(`select * from ${CONSUMER_MIGRATION_TABLE}`)
 * ```
 */
export const CONSUMER_MIGRATION_TABLE = 'outbox_consumer_migration'
/**
 * Kysely migration lock table of this package.
 *
 * @example
 * ```ts
 * import { CONSUMER_MIGRATION_LOCK_TABLE } from '@outbox/consumer'
 * console.log(CONSUMER_MIGRATION_LOCK_TABLE) // 'outbox_consumer_migration_lock'
 * ```
 */
export const CONSUMER_MIGRATION_LOCK_TABLE = 'outbox_consumer_migration_lock'

/**
 * Options of {@link migrate} and {@link consumerMigrationSql}.
 *
 * @example
 * ```ts
 * import type { MigrateOptions } from '@outbox/consumer'
 * const options: MigrateOptions = { schema: 'webhooks' }
 * ```
 */
export interface MigrateOptions {
  /** Schema to create the tables (and the migration tables) in; created if missing. @defaultValue the search_path */
  readonly schema?: string
}

/** Returns `db` scoped to the consumer's schema, or unchanged when the search_path decides. */
export function inSchema<T extends Kysely<any>>(db: T, schema: string | undefined): T {
  return (schema === undefined ? db : db.withSchema(schema)) as T
}

/**
 * Name of the function migration 0002 created and 0003 keyed by source (its 0002 signature stays as a wrapper);
 * `recordEvent` calls it, and an error naming it means a schema migrated by an older consumer.
 */
export const RECORD_EVENT_FUNCTION = 'outbox_record_event'

/** `name`, qualified with the consumer's schema when one is configured (else the search_path finds it). */
export function qualified(schema: string | undefined, name: string): RawBuilder<unknown> {
  return schema === undefined ? sql.id(name) : sql.id(schema, name)
}

/**
 * The migrations as Kysely's `Migrator` runs them, each its frozen text (src/migrations/). Forward only: no
 * `down` (see the README's "Upgrades and uninstalling").
 */
function migrations(schema: string | undefined): Record<string, Migration> {
  const byName: Record<string, Migration> = {}
  for (const migration of consumerMigrations) {
    const text = migration.sql(schema)
    byName[migration.name] = { up: async (db) => void (await sql.raw(text).execute(db)) }
  }
  return byName
}

/**
 * Creates or updates the consumer tables (`processed_events`, `consumer_cursors`) and the `outbox_record_event`
 * function `dedupe` calls. Run it again after upgrading this package: a schema migrated by an older version makes
 * every delivery fail with `ERR_OUTBOX_SCHEMA_OUTDATED` (answered 500, retried by the producer).
 *
 * Idempotent and safe to run from several processes at once: Kysely's `Migrator` records what ran in
 * `outbox_consumer_migration` (its own table, so it lives next to the producer's and the application's
 * migrations in one database) and serializes concurrent runs. Throws {@link OutboxError}
 * `ERR_OUTBOX_MIGRATION_FAILED` with the database error as `cause`.
 *
 * @example
 * ```ts
 * import { createPool, migrate } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * await migrate(db)                          // tables in the search_path (usually public)
 * await migrate(db, { schema: 'webhooks' })  // or in a schema of their own
 * ```
 */
export async function migrate(db: Kysely<any>, options: MigrateOptions = {}): Promise<void> {
  checkDatabase(db, 'migrate')
  const schema = checkSchema(options.schema, 'migrate')
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations(schema) },
    migrationTableName: CONSUMER_MIGRATION_TABLE,
    migrationLockTableName: CONSUMER_MIGRATION_LOCK_TABLE,
    ...(schema === undefined ? {} : { migrationTableSchema: schema }),
  })
  const { error, results } = await migrator.migrateToLatest()
  if (error !== undefined) {
    const failed = results?.find((result) => result.status === 'Error')?.migrationName
    throw new OutboxError(
      'ERR_OUTBOX_MIGRATION_FAILED',
      `migrate: the consumer tables could not be migrated${failed ? ` (migration ${failed})` : ''}: ${
        error instanceof Error ? error.message : String(error)
      }`,
      { cause: error },
    )
  }
}

/**
 * The consumer's DDL as one SQL script, for teams that run their own migration tool: the text of every migration
 * {@link migrate} runs, in order, after a `create schema if not exists` when a schema is given. It uses
 * `IF NOT EXISTS` (`CREATE OR REPLACE` for the function) throughout, so running it twice is harmless. It does not
 * write `outbox_consumer_migration`: use either this or {@link migrate}, not both; after upgrading this package,
 * apply the new script.
 *
 * @example
 * ```ts
 * import { writeFileSync } from 'node:fs'
 * import { consumerMigrationSql } from '@outbox/consumer'
 * writeFileSync('migrations/20260101_outbox_consumer.sql', consumerMigrationSql({ schema: 'webhooks' }))
 * ```
 */
export function consumerMigrationSql(options: MigrateOptions = {}): string {
  const schema = checkSchema(options.schema, 'consumerMigrationSql')
  const statements = consumerMigrations.map((migration) => migration.sql(schema))
  if (schema !== undefined) {
    statements.unshift(`create schema if not exists "${schema.replaceAll('"', '""')}";\n`)
  }
  return statements.join('')
}

/**
 * The consumer's DDL as one SQL script.
 *
 * @deprecated Use {@link consumerMigrationSql}, the same function under the name that says which package's DDL
 * it is (the producer's is `producerMigrationSql`).
 *
 * @example
 * ```ts
 * import { consumerMigrationSql } from '@outbox/consumer'
 * const ddl = consumerMigrationSql({ schema: 'webhooks' })
 * ```
 */
export const migrationSql: (options?: MigrateOptions) => string = consumerMigrationSql
