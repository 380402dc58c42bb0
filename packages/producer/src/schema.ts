import type { ColumnType, Generated, Kysely } from 'kysely'
import { sql } from 'kysely'
import { type Migration, type MigrationProvider, Migrator } from 'kysely/migration'
import { OutboxError } from './errors.js'
import { producerMigrations } from './migrations/index.js'
import { resolveSchema } from './schema-name.js'

/** Delivery state of an outbox row. */
export type EventStatus = 'pending' | 'sent' | 'dead'

/** Why a lane is parked: a 409 from the consumer, or an exhausted event under `onExhausted: 'block'`. */
export type BlockedReason = 'conflict' | 'exhausted'

/** The `outbox` table: one row per event and subscription it goes to (migration 0008). */
export interface OutboxTable {
  id: Generated<string>
  event_id: string
  /** The subscription this row delivers to: the nil uuid for the implicit `endpoint` subscription. */
  subscription_id: ColumnType<string, string | undefined, string>
  /** The tenant the event was enqueued for; null without one. */
  tenant: string | null
  aggregate_type: string
  aggregate_id: string
  sequence: ColumnType<string, number, number>
  event_type: string
  payload: ColumnType<unknown, string, string>
  created_at: ColumnType<Date, Date | undefined, Date>
  status: ColumnType<EventStatus, EventStatus | undefined, EventStatus>
  /** A pending row's earliest next try; for a lane's head this is the lane's due time. */
  available_at: ColumnType<Date, Date | undefined, Date>
  attempts: ColumnType<number, number | undefined, number>
  last_attempt_at: Date | null
  last_status: number | null
  last_error: string | null
  /** The consumer's `status` from the 2xx body (`applied`, `duplicate_ignored`, `stale_ignored`). */
  delivery_status: string | null
  sent_at: Date | null
  dead_at: Date | null
  /** When the row's first failed attempt happened, since it became pending or was last redriven (migration 0007). */
  first_failed_at: Date | null
  /** The payload's size as the relay sends it; null for rows written before migration 0007. */
  payload_bytes: number | null
  /** The W3C trace context the event was enqueued under, as JSON; null without one (migration 0015). */
  trace_context: ColumnType<string | null, string | null | undefined, string | null>
  /** Attempts charged at takeovers that proved nothing; never counted towards giving up (migration 0019). */
  takeover_charges: ColumnType<number, number | undefined, number>
  /** Every further attempt of the row is made alone in its relay, until it is sent or dead-lettered (migration 0019). */
  suspect: ColumnType<boolean, boolean | undefined, boolean>
}

/** The per-aggregate sequence counter: enqueuers serialize on its row until commit. Never pruned. */
export interface OutboxCounterTable {
  aggregate_type: string
  aggregate_id: string
  last_sequence: ColumnType<string, number, number>
}

/**
 * The lane row of a subscription's aggregate: who holds it (claim token + lease) and whether it is parked. Pruned
 * only with its subscription.
 */
export interface OutboxLaneTable {
  subscription_id: ColumnType<string, string | undefined, string>
  aggregate_type: string
  aggregate_id: string
  claim_token: string | null
  leased_until: Date | null
  blocked_reason: BlockedReason | null
  blocked_at: Date | null
  /** Consecutive 409 answers, for the capped park backoff. */
  conflict_count: ColumnType<number, number | undefined, number>
  /** The lane's claim once expired without an outcome: its owners record when a request starts (migration 0007). */
  watch_starts: ColumnType<boolean, boolean | undefined, boolean>
  /** The claim token under which a watched lane's request started; a takeover finding it charges the head. */
  started_token: string | null
  /** The request recorded in `started_token` was started alone in its relay: a takeover then proves it (migration 0019). */
  started_alone: ColumnType<boolean, boolean | undefined, boolean>
}

/** A webhook destination (migrations 0008, 0009, 0012, 0013 and 0014); read it through `listSubscriptions`. */
export interface OutboxSubscriptionTable {
  id: Generated<string>
  name: string | null
  url: string | null
  tenant: string | null
  event_types: string[] | null
  state: ColumnType<'enabled' | 'disabled', 'enabled' | 'disabled' | undefined, 'enabled' | 'disabled'>
  disabled_reason: string | null
  disabled_at: Date | null
  on_exhausted: 'skip' | 'block' | null
  max_in_flight: number | null
  retry_schedule: string[] | null
  request_timeout_ms: number | null
  created_at: ColumnType<Date, Date | undefined, Date>
  updated_at: ColumnType<Date, Date | undefined, Date>
  breaker_state: ColumnType<'closed' | 'open', 'closed' | 'open' | undefined, 'closed' | 'open'>
  failure_streak: ColumnType<number, number | undefined, number>
  streak_started_at: Date | null
  breaker_opened_at: Date | null
  breaker_cooldown_ms: string | null
  probe_at: Date | null
  probe_token: string | null
  throttled_until: Date | null
  /** Most requests per second across relays (`ratePerSecond`); null for no rate. */
  rate_per_second: number | null
  /** The rate's token bucket: tokens left as of `rate_refilled_at`; null for a full bucket. */
  rate_tokens: number | null
  rate_refilled_at: Date | null
  /** Pending deliveries prune dropped while it was disabled past `disabledRetention`, cumulative (migration 0013). */
  dropped_deliveries: ColumnType<string, number | undefined, number>
  /** When prune last dropped any of them; null if it never did (migration 0013). */
  last_dropped_at: Date | null
  /** The backfill of `startAt: 'earliest'` (migration 0014): null when none was asked; it only moves forward. */
  backfill_state: 'running' | 'done' | null
  /** The keyset cursor: the last aggregate the backfill reached. */
  backfill_cursor_type: string | null
  backfill_cursor_id: string | null
  /** The last sequence copied of the cursor's aggregate when a batch stopped in it; null once it is done. */
  backfill_cursor_sequence: string | null
  backfill_aggregates_done: ColumnType<string, string | undefined, string>
  /** The aggregates counted by the first batch. */
  backfill_aggregates_total: string | null
  backfill_events: ColumnType<string, string | undefined, string>
  backfill_started_at: Date | null
  backfill_finished_at: Date | null
  /** Since when batches have given up on a transaction holding one of their aggregates; null when not stalled. */
  backfill_waiting_since: Date | null
}

/** A subscription's signing secret; the one without `expires_at` is current. Never returned by the API. */
export interface OutboxSubscriptionSecretTable {
  id: Generated<string>
  subscription_id: string
  secret: string
  created_at: ColumnType<Date, Date | undefined, Date>
  expires_at: Date | null
}

/** The delivery log (migration 0010): one row per attempt, per subscription; pruned by its own retention. */
export interface OutboxDeliveryAttemptTable {
  id: Generated<string>
  subscription_id: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: ColumnType<string, number, number>
  attempted_at: Date
  /** Null for an attempt charged at a takeover (the request's duration is unknown). */
  duration_ms: number | null
  http_status: number | null
  outcome: 'delivered' | 'failed' | 'conflict' | 'dead'
  /** The answer body's first 500 characters. */
  answer: string | null
  /** Why no answer came. */
  error: string | null
}

/** The audit log (migration 0011): one row per operator action on lanes, dead letters or integrity. */
export interface OutboxAuditTable {
  id: Generated<string>
  at: ColumnType<Date, Date | undefined, never>
  actor: string
  action: string
  target: ColumnType<unknown, string, never>
  result: ColumnType<unknown, string, never>
}

/** The producer tables, for typing a `Kysely` instance. */
export interface ProducerDatabase {
  outbox: OutboxTable
  outbox_counter: OutboxCounterTable
  outbox_lane: OutboxLaneTable
  outbox_subscription: OutboxSubscriptionTable
  outbox_subscription_secret: OutboxSubscriptionSecretTable
  outbox_delivery_attempt: OutboxDeliveryAttemptTable
  outbox_audit: OutboxAuditTable
}

/** Name of the producer's own migration table (the consumer and the application keep theirs apart). */
export const PRODUCER_MIGRATION_TABLE = 'outbox_producer_migration'

/**
 * The producer schema as plain SQL, for teams that run their own migration tool. Apply it once per schema; it is
 * the same DDL {@link migrate} runs (without the migration bookkeeping).
 *
 * @example
 * ```ts
 * import { producerMigrationSql } from '@outbox/producer'
 * const ddl = producerMigrationSql({ schema: 'outbox' })
 * ```
 */
export function producerMigrationSql(options: { schema?: string } = {}): string {
  const schema = resolveSchema(options.schema)
  const steps = producerMigrations.map((migration) => migration.sql(schema))
  return [`CREATE SCHEMA IF NOT EXISTS "${schema}";`, ...steps].join('\n')
}

/** First half of the advisory lock key that serialises concurrent {@link migrate} calls (the schema is the second). */
const MIGRATE_LOCK_KEY = 0x6f757462 // "outb"

/** Options of {@link migrate}. */
export interface MigrateOptions {
  /** Schema of the producer tables, created if missing. @defaultValue 'public' */
  readonly schema?: string
}

/**
 * Creates or updates the producer tables. Idempotent and safe to run from several processes at once (Kysely's
 * migration lock); keeps its own migration table, `outbox_producer_migration`, in the same schema.
 *
 * @example
 * ```ts
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 * import { migrate } from '@outbox/producer'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * // Without these two, one database restart crashes the process: pg emits 'error' on the pool or the client.
 * pool.on('error', (error) => console.warn('idle connection lost', error.message))
 * pool.on('connect', (client) => client.on('error', (error) => console.warn('connection lost', error.message)))
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
 * await migrate(db, { schema: 'public' })
 * ```
 */
export async function migrate(db: Kysely<any>, options: MigrateOptions = {}): Promise<void> {
  const schema = resolveSchema(options.schema)
  try {
    // Two concurrent `CREATE SCHEMA IF NOT EXISTS` can both miss the schema and one then fails on the catalog's
    // unique index; an advisory lock (released at commit) makes the second wait and then find the schema.
    await db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK_KEY}, hashtext(${schema}))`.execute(trx)
      await sql`CREATE SCHEMA IF NOT EXISTS ${sql.id(schema)}`.execute(trx)
    })
  } catch (error) {
    throw new OutboxError('ERR_OUTBOX_MIGRATION_FAILED', `producer migration failed: ${String(error)}`, {
      cause: error,
    })
  }
  const provider: MigrationProvider = {
    async getMigrations() {
      // Forward only: no `down` (see the README's "Upgrades and uninstalling").
      const migrations: Record<string, Migration> = {}
      for (const migration of producerMigrations) {
        const text = migration.sql(schema)
        migrations[migration.name] = { up: async (trx) => void (await sql.raw(text).execute(trx)) }
      }
      return migrations
    },
  }
  const migrator = new Migrator({
    db,
    provider,
    migrationTableSchema: schema,
    migrationTableName: PRODUCER_MIGRATION_TABLE,
    migrationLockTableName: `${PRODUCER_MIGRATION_TABLE}_lock`,
  })
  const { error } = await migrator.migrateToLatest()
  if (error) {
    throw new OutboxError('ERR_OUTBOX_MIGRATION_FAILED', `producer migration failed: ${String(error)}`, {
      cause: error,
    })
  }
}
