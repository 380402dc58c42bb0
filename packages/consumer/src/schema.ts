import {
  type CompiledQuery,
  DummyDriver,
  type Generated,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type RawBuilder,
  sql,
} from 'kysely'
import { type Migration, Migrator } from 'kysely/migration'
import { OutboxError } from './errors.js'
import { checkDatabase, checkSchema } from './options.js'

/**
 * A row of `processed_events`: one event id this consumer has recorded (applied or stale). The primary key on
 * `event_id` is what makes a duplicate a no-op.
 *
 * @example
 * ```ts
 * import type { ProcessedEventsTable } from '@outbox/consumer'
 * type Column = keyof ProcessedEventsTable // 'event_id' | 'aggregate_type' | …
 * ```
 */
export interface ProcessedEventsTable {
  event_id: string
  aggregate_type: string
  aggregate_id: string
  /** bigint: pg returns it as a string. */
  sequence: string | number
  type: string
  received_at: Generated<Date>
}

/**
 * A row of `consumer_cursors`: the highest sequence applied for one aggregate (type, id). It only grows, and it is
 * never pruned.
 *
 * @example
 * ```ts
 * import type { ConsumerCursorsTable } from '@outbox/consumer'
 * const lastApplied = (row: Pick<ConsumerCursorsTable, 'last_sequence'>) => Number(row.last_sequence)
 * ```
 */
export interface ConsumerCursorsTable {
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
 * import type { ConsumerDatabase } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<ConsumerDatabase>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
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
 * Options of {@link migrate} and {@link migrationSql}.
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
 * The DDL of each migration as Kysely builders, so `migrate` and {@link migrationSql} can never disagree.
 * `IF NOT EXISTS` lets a team paste the SQL into its own tool and run it again safely.
 */
function migration0001(db: Kysely<any>) {
  return [
    db.schema
      .createTable('processed_events')
      .ifNotExists()
      .addColumn('event_id', 'uuid', (col) => col.primaryKey())
      .addColumn('aggregate_type', 'text', (col) => col.notNull())
      .addColumn('aggregate_id', 'text', (col) => col.notNull())
      .addColumn('sequence', 'bigint', (col) => col.notNull().check(sql`sequence >= 1`))
      .addColumn('type', 'text', (col) => col.notNull())
      .addColumn('received_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`)),
    // pruneProcessed deletes the oldest rows first in bounded batches: this index makes each batch a range scan.
    db.schema
      .createIndex('processed_events_received_at_idx')
      .ifNotExists()
      .on('processed_events')
      .column('received_at'),
    db.schema
      .createTable('consumer_cursors')
      .ifNotExists()
      .addColumn('aggregate_type', 'text', (col) => col.notNull())
      .addColumn('aggregate_id', 'text', (col) => col.notNull())
      .addColumn('last_sequence', 'bigint', (col) =>
        col.notNull().defaultTo(0).check(sql`last_sequence >= 0`),
      )
      .addColumn('updated_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
      .addPrimaryKeyConstraint('consumer_cursors_pkey', ['aggregate_type', 'aggregate_id']),
  ]
}

/**
 * Name of the function migration 0002 creates; `recordEvent` calls it, and an error naming it means a schema
 * migrated by an older consumer.
 */
export const RECORD_EVENT_FUNCTION = 'outbox_record_event'

/** `name`, qualified with the consumer's schema when one is configured (else the search_path finds it). */
export function qualified(schema: string | undefined, name: string): RawBuilder<unknown> {
  return schema === undefined ? sql.id(name) : sql.id(schema, name)
}

/** One DDL statement, as the schema builders and a raw `sql` statement both provide it. */
interface DdlStatement {
  compile(): CompiledQuery
  execute(): Promise<unknown>
}

/**
 * sql/record-event.ts's statement as a PL/pgSQL function: PL/pgSQL caches the plans of its statements per
 * connection, where the same statement sent as text with parameters was parsed and planned by PostgreSQL on
 * every delivery (≈ 110 µs more than a plain insert; Kysely cannot prepare statements). The statement, its
 * concurrency argument and its measured cost are explained there; this is the same ONE statement, with the
 * policy and `firstSequence` as parameters instead of being compiled into it.
 *
 * `CREATE OR REPLACE` keeps it safe to run twice, like the `IF NOT EXISTS` of migration 0001.
 */
function migration0002(db: Kysely<any>, schema: string | undefined): DdlStatement[] {
  const table = (name: string) => qualified(schema, name)
  // The body is dollar-quoted text: its tag must not occur in it (a schema name may contain anything).
  const quotedSchema = schema === undefined ? '' : sql.id(schema).compile(db).sql
  let tag = '$fn$'
  for (let n = 1; quotedSchema.includes(tag); n++) tag = `$fn${n}$`
  const body = sql.raw(tag)
  // No `SET plan_cache_mode = force_generic_plan` clause: measured (one connection, 4000 calls), the default mode
  // was as fast — 322 and 344 µs per applying call against 333 and 351 µs forced on PostgreSQL 15, 653 against
  // 650 µs on 18 — since it settles on the generic plan by itself, while a SET clause saves and restores the
  // setting on every call. `force_custom_plan` (re-planning every call) cost 60–80 µs more. Nor
  // `set_config(…, true)` as in the producer's claim: that would last to COMMIT, into the application's handler.
  const create = sql`CREATE OR REPLACE FUNCTION ${qualified(schema, RECORD_EVENT_FUNCTION)}(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_sequence bigint, p_type text,
  p_policy text, p_first_sequence text, p_initial_cursor bigint
) RETURNS text LANGUAGE plpgsql AS ${body}
DECLARE
  v_cursor bigint;
BEGIN
  -- The callers pass only these; anything else would silently judge every event as not applying.
  IF p_policy NOT IN ('monotonic', 'strict') OR p_first_sequence NOT IN ('1', 'any') THEN
    RAISE EXCEPTION 'outbox_record_event: unknown policy % / first sequence %', p_policy, p_first_sequence
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH recorded AS (
    INSERT INTO ${table('processed_events')} (event_id, aggregate_type, aggregate_id, sequence, type)
    VALUES (p_event_id, p_aggregate_type, p_aggregate_id, p_sequence, p_type)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING aggregate_type, aggregate_id
  ), advanced AS (
    INSERT INTO ${table('consumer_cursors')} AS c (aggregate_type, aggregate_id, last_sequence)
    SELECT r.aggregate_type, r.aggregate_id, p_initial_cursor FROM recorded r
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = p_sequence, updated_at = now()
    -- "Apply?": judgeSequence(policy, firstSequence, cursor, sequence).kind === 'apply' (src/cursor.ts), proven
    -- equal to it by a property test against this function (cursor.policies.test.ts).
    WHERE CASE p_policy
      WHEN 'monotonic' THEN c.last_sequence < p_sequence
      ELSE c.last_sequence = p_sequence - 1 OR (p_first_sequence = 'any' AND c.last_sequence = 0)
    END
    RETURNING c.last_sequence
  )
  SELECT (SELECT a.last_sequence FROM advanced a) INTO v_cursor FROM recorded;
  IF NOT FOUND THEN
    RETURN 'duplicate';
  END IF;
  RETURN CASE WHEN v_cursor = p_sequence THEN 'advanced' ELSE 'held' END;
END
${body}`
  return [{ compile: () => create.compile(db), execute: () => create.execute(db) }]
}

function migrations(schema: string | undefined): Record<string, Migration> {
  return {
    '0001_processed_events_and_cursors': {
      async up(db) {
        for (const statement of migration0001(inSchema(db, schema))) await statement.execute()
      },
      async down(db) {
        const scoped = inSchema(db, schema)
        await scoped.schema.dropTable('consumer_cursors').ifExists().execute()
        await scoped.schema.dropTable('processed_events').ifExists().execute()
      },
    },
    '0002_record_event_function': {
      async up(db) {
        for (const statement of migration0002(db, schema)) await statement.execute()
      },
      async down(db) {
        await sql`DROP FUNCTION IF EXISTS ${qualified(schema, RECORD_EVENT_FUNCTION)}`.execute(db)
      },
    },
  }
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
 * import { migrate } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
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

/** A Kysely that only compiles: it turns the migration builders into SQL text without a connection. */
function compiler(): Kysely<any> {
  return new Kysely<any>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => new PostgresIntrospector(db),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  })
}

/**
 * The consumer's DDL as one SQL script, for teams that run their own migration tool. It is compiled from the
 * very builders `migrate` executes, and uses `IF NOT EXISTS` (`CREATE OR REPLACE` for the function) throughout,
 * so running it twice is harmless. It does not write `outbox_consumer_migration`: use either this or
 * {@link migrate}, not both; after upgrading this package, apply the new script.
 *
 * @example
 * ```ts
 * import { writeFileSync } from 'node:fs'
 * import { migrationSql } from '@outbox/consumer'
 * writeFileSync('migrations/20260101_outbox_consumer.sql', migrationSql({ schema: 'webhooks' }))
 * ```
 */
export function migrationSql(options: MigrateOptions = {}): string {
  const schema = checkSchema(options.schema, 'migrationSql')
  const db = compiler()
  const statements: string[] = []
  if (schema !== undefined) statements.push(db.schema.createSchema(schema).ifNotExists().compile().sql)
  for (const builder of [...migration0001(inSchema(db, schema)), ...migration0002(db, schema)]) {
    const compiled = builder.compile()
    // DDL cannot take bind parameters; the builders above only use literals, and this guard keeps it so.
    if (compiled.parameters.length > 0) throw new Error('migrationSql: a DDL statement has parameters')
    statements.push(compiled.sql)
  }
  return `${statements.join(';\n')};\n`
}
