import type { ColumnType, Generated, Kysely } from 'kysely'
import { sql } from 'kysely'
import { type Migration, type MigrationProvider, Migrator } from 'kysely/migration'
import { OutboxError } from './errors.js'
import { migration0007 } from './migrations/0007-liveness.js'
import { resolveSchema } from './schema-name.js'

/** Delivery state of an outbox row. */
export type EventStatus = 'pending' | 'sent' | 'dead'

/** Why a lane is parked: a 409 from the consumer, or an exhausted event under `onExhausted: 'block'`. */
export type BlockedReason = 'conflict' | 'exhausted'

/** The `outbox` table: one row per event. */
export interface OutboxTable {
  id: Generated<string>
  event_id: string
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
}

/** The per-aggregate sequence counter: enqueuers serialize on its row until commit. Never pruned. */
export interface OutboxCounterTable {
  aggregate_type: string
  aggregate_id: string
  last_sequence: ColumnType<string, number, number>
}

/** The lane row of an aggregate: who holds it (claim token + lease) and whether it is parked. Never pruned. */
export interface OutboxLaneTable {
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
}

/** The producer tables, for typing a `Kysely` instance. */
export interface ProducerDatabase {
  outbox: OutboxTable
  outbox_counter: OutboxCounterTable
  outbox_lane: OutboxLaneTable
}

/** Name of the producer's own migration table (the consumer and the application keep theirs apart). */
export const PRODUCER_MIGRATION_TABLE = 'outbox_producer_migration'

/**
 * `outbox_claim_lanes` (see the relay's claimLanes for the statements and the races they close), with the due
 * scan's check that skips rows of leased and blocked lanes given as SQL: migration 0006 changed only that check.
 * Both migrations build their text here, so it must not change: a later change is a new migration.
 */
function claimLanesFunction(s: string, skipBusyLanes: string): string {
  return `CREATE OR REPLACE FUNCTION ${s}.outbox_claim_lanes(p_lanes integer, p_lease_ms bigint, p_scan_rows integer, p_batch integer)
RETURNS TABLE (
  aggregate_type text, aggregate_id text, claim_token uuid, taken_over boolean, conflict_count integer,
  id bigint, event_id uuid, sequence bigint, event_type text, payload text, created_at timestamptz, attempts integer,
  window_full boolean
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_types text[];
  v_ids text[];
  v_tokens uuid[];
  v_taken boolean[];
  v_conflicts integer[];
  v_scanned bigint;
BEGIN
  -- The claim is a lease, and the relay calls this in a transaction of its own, so both settings end with it.
  -- A claim need not wait for its WAL flush: if the server crashes before the flush the claim is simply gone, and
  -- another relay may take the lane early, sending again what this one sends: duplicates, absorbed by the
  -- consumer, never a loss or a reorder (each relay still sends a lane in order, one request at a time). The next
  -- durable commit (a mark, an enqueue) flushes it anyway. That flush was a fifth of a claim's time on a quiet lane.
  PERFORM set_config('synchronous_commit', 'off', true);
  -- One plan per connection for the statements below: the planner otherwise re-plans them per call while their
  -- custom plans look cheaper, about a third of a small claim's server time.
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  WITH due AS (
    SELECT o.aggregate_type, o.aggregate_id, min(o.available_at) AS first_due, count(*) AS rows_scanned
    FROM (
      SELECT o.aggregate_type, o.aggregate_id, o.available_at FROM ${s}.outbox o
      WHERE o.status = 'pending' AND o.available_at <= now()
${skipBusyLanes}      ORDER BY o.available_at
      LIMIT p_scan_rows
    ) o
    GROUP BY o.aggregate_type, o.aggregate_id
  ), picked AS (
    SELECT l.aggregate_type, l.aggregate_id, (l.claim_token IS NOT NULL) AS taken_over
    FROM (SELECT due.aggregate_type, due.aggregate_id FROM due ORDER BY due.first_due) d
    JOIN ${s}.outbox_lane l ON l.aggregate_type = d.aggregate_type AND l.aggregate_id = d.aggregate_id
    WHERE (l.claim_token IS NULL OR l.leased_until <= now())
      AND l.blocked_reason IS DISTINCT FROM 'exhausted'
      AND (
        SELECT head.available_at FROM ${s}.outbox head
        WHERE head.aggregate_type = l.aggregate_type AND head.aggregate_id = l.aggregate_id
          AND head.status = 'pending'
        ORDER BY head.sequence
        LIMIT 1
      ) <= now()
    LIMIT p_lanes
    FOR UPDATE OF l SKIP LOCKED
  ), claimed AS (
    UPDATE ${s}.outbox_lane l
    SET claim_token = gen_random_uuid(), leased_until = now() + p_lease_ms * interval '1 millisecond'
    FROM picked
    WHERE l.aggregate_type = picked.aggregate_type AND l.aggregate_id = picked.aggregate_id
    RETURNING l.aggregate_type, l.aggregate_id, l.claim_token, picked.taken_over, l.conflict_count
  )
  -- How many due rows the scan read: when it read all it was allowed, more due lanes may lie past its window, so
  -- the relay claims again at once instead of waiting (the window stays small: rows, not lanes, are its unit).
  SELECT array_agg(c.aggregate_type), array_agg(c.aggregate_id), array_agg(c.claim_token), array_agg(c.taken_over),
         array_agg(c.conflict_count), (SELECT sum(due.rows_scanned) FROM due)
  INTO v_types, v_ids, v_tokens, v_taken, v_conflicts, v_scanned
  FROM claimed c;
  IF v_tokens IS NULL THEN
    RETURN;
  END IF;
  -- A statement of its own, so under READ COMMITTED it reads with a fresh snapshot: rows the lane's previous owner
  -- marked sent just before the claim are not sent again. The claimed lane rows stay locked until this call
  -- commits, so no one can take them in between. A lane whose rows were all sent meanwhile comes back with none.
  RETURN QUERY
    SELECT c.aggregate_type, c.aggregate_id, c.claim_token, c.taken_over, c.conflict_count,
           e.id, e.event_id, e.sequence, e.event_type, e.payload::text, e.created_at, e.attempts,
           v_scanned >= p_scan_rows
    FROM unnest(v_types, v_ids, v_tokens, v_taken, v_conflicts) WITH ORDINALITY
      AS c(aggregate_type, aggregate_id, claim_token, taken_over, conflict_count, n)
    LEFT JOIN LATERAL (
      SELECT o.id, o.event_id, o.sequence, o.event_type, o.payload, o.created_at, o.attempts FROM ${s}.outbox o
      WHERE o.aggregate_type = c.aggregate_type AND o.aggregate_id = c.aggregate_id AND o.status = 'pending'
      ORDER BY o.sequence
      LIMIT p_batch
    ) e ON true
    ORDER BY c.n, e.sequence;
END
$fn$;
`
}

/** 0004's busy-lane check: one anti join, whose plan the planner took from statistics that predate the leases. */
function busyLanesNotExists(s: string): string {
  return `        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane busy
          WHERE busy.aggregate_type = o.aggregate_type AND busy.aggregate_id = o.aggregate_id
            AND ((busy.claim_token IS NOT NULL AND busy.leased_until > now()) OR busy.blocked_reason = 'exhausted')
        )
`
}

/** 0006's busy-lane check: leased lanes through a hashed set, blocked lanes through statistics that see them. */
function busyLanesHashed(s: string): string {
  return `        -- Leased lanes: a hashed NOT IN, built once per claim from the claim-token index. 0004 checked them with
        -- NOT EXISTS, which the planner ran as a nested loop over every leased lane for each candidate row, because
        -- the lane table's statistics are taken at some moment and leases come and go within seconds (with 256
        -- leased and statistics that saw none, 164k comparisons in a claim of 64 lanes). The set is as small as
        -- the relays' concurrency, so it is always hashed; NOT IN is exact here, both key columns being NOT NULL.
        AND (o.aggregate_type, o.aggregate_id) NOT IN (
          SELECT busy.aggregate_type, busy.aggregate_id FROM ${s}.outbox_lane busy
          WHERE busy.claim_token IS NOT NULL AND busy.leased_until > now()
        )
        -- Blocked lanes ('block' after a dead letter) are long-lived, so the statistics do see them. Their rows wait
        -- at 'infinity'; a row enqueued as the lane was blocked may still look due, and must not fill the window.
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane parked
          WHERE parked.aggregate_type = o.aggregate_type AND parked.aggregate_id = o.aggregate_id
            AND parked.blocked_reason = 'exhausted'
        )
`
}

function migrationSteps(schema: string): Record<string, string> {
  const s = `"${schema}"`
  return {
    '0001_outbox': `
CREATE TABLE IF NOT EXISTS ${s}.outbox (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id uuid NOT NULL UNIQUE,
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  sequence bigint NOT NULL,
  event_type text NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dead')),
  available_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0,
  last_attempt_at timestamptz,
  last_status integer,
  last_error text,
  delivery_status text,
  sent_at timestamptz,
  dead_at timestamptz,
  UNIQUE (aggregate_type, aggregate_id, sequence)
);
-- A lane's head and the rows behind it, pending rows only: stays small however many sent rows pile up.
CREATE INDEX IF NOT EXISTS outbox_pending_lane_idx
  ON ${s}.outbox (aggregate_type, aggregate_id, sequence) INCLUDE (available_at) WHERE status = 'pending';
-- Due pending rows in time order: the claim starts here, so lanes waiting in backoff are never scanned.
CREATE INDEX IF NOT EXISTS outbox_due_idx
  ON ${s}.outbox (available_at) INCLUDE (aggregate_type, aggregate_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_sent_idx ON ${s}.outbox (sent_at) WHERE status = 'sent';
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON ${s}.outbox (dead_at) WHERE status = 'dead';

CREATE TABLE IF NOT EXISTS ${s}.outbox_counter (
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  last_sequence bigint NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE TABLE IF NOT EXISTS ${s}.outbox_lane (
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  claim_token uuid,
  leased_until timestamptz,
  blocked_reason text CHECK (blocked_reason IN ('conflict', 'exhausted')),
  blocked_at timestamptz,
  conflict_count integer NOT NULL DEFAULT 0,
  PRIMARY KEY (aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS outbox_lane_leased_idx ON ${s}.outbox_lane (leased_until) WHERE claim_token IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_lane_blocked_idx ON ${s}.outbox_lane (blocked_at) WHERE blocked_reason IS NOT NULL;
`,
    // Every write a lane's owner makes (marks, release, retry, park, dead letter) finds the lane by its claim
    // token. Without this index each of them scanned the whole lane table, which is never pruned and holds one row
    // per aggregate ever seen: fine at a thousand aggregates, a full scan of millions per flush in production. Only
    // leased lanes are in it, so it stays as small as the relays' concurrency.
    '0002_lane_claim_token': `
CREATE UNIQUE INDEX IF NOT EXISTS outbox_lane_claim_token_idx ON ${s}.outbox_lane (claim_token) WHERE claim_token IS NOT NULL;
`,
    // enqueue's statement as functions: PL/pgSQL caches the plans of its statements per connection, where the same
    // work sent as one SQL statement was parsed and planned on every call — about half of enqueue's cost.
    '0003_enqueue_function': `
-- The due time of a row joining its lane: behind a head in backoff (or a parked lane) it must not look due, and a
-- lane blocked by onExhausted 'block' keeps it out of the due index until a redrive.
CREATE OR REPLACE FUNCTION ${s}.outbox_new_row_due(p_aggregate_type text, p_aggregate_id text)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF EXISTS (
    SELECT 1 FROM ${s}.outbox_lane b
    WHERE b.aggregate_type = p_aggregate_type AND b.aggregate_id = p_aggregate_id AND b.blocked_reason = 'exhausted'
  ) THEN
    RETURN 'infinity'::timestamptz;
  END IF;
  RETURN greatest(now(), coalesce((
    SELECT p.available_at FROM ${s}.outbox p
    WHERE p.aggregate_type = p_aggregate_type AND p.aggregate_id = p_aggregate_id AND p.status = 'pending'
    ORDER BY p.sequence DESC LIMIT 1
  ), now()));
END
$fn$;

-- One event: bump the aggregate's counter (its row lock orders the aggregate's writers until commit), make sure
-- the lane row exists, insert the event, NOTIFY the channel when one is given. Returns the event's sequence.
CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb, p_channel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  v_sequence bigint;
BEGIN
  INSERT INTO ${s}.outbox_counter AS c (aggregate_type, aggregate_id, last_sequence)
  VALUES (p_aggregate_type, p_aggregate_id, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + 1
  RETURNING c.last_sequence INTO v_sequence;
  -- DO NOTHING takes no lock on an existing lane row: an enqueue never waits on a relay holding the lane.
  INSERT INTO ${s}.outbox_lane (aggregate_type, aggregate_id) VALUES (p_aggregate_type, p_aggregate_id)
  ON CONFLICT DO NOTHING;
  INSERT INTO ${s}.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, available_at)
  VALUES (p_event_id, p_aggregate_type, p_aggregate_id, v_sequence, p_event_type, p_payload,
          ${s}.outbox_new_row_due(p_aggregate_type, p_aggregate_id));
  IF p_channel IS NOT NULL THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN v_sequence;
END
$fn$;
`,
    // The relay's claim and first read as ONE function call: its plans are cached per connection (the two
    // statements sent from the relay were parsed and planned on every claim) and it costs one round trip, not two.
    // The statements and the races they close are explained in the relay's claimLanes.
    '0004_claim_function': `
${claimLanesFunction(s, busyLanesNotExists(s))}`,
    // outbox_enqueue again, cheaper on the server: the due-time rule is inlined (one nested PL/pgSQL call less) and
    // the lane's state is read once. A FIRST event (the counter row was just created, so sequence 1: no earlier
    // event, no head in backoff) whose lane row this call created is due now, and skips both lookups; a later event
    // reads the lane row once, for its existence and whether it is parked, instead of an insert attempt plus an
    // EXISTS. Self time per call (track_functions, PostgreSQL 18, one connection, 2000 calls each, interleaved):
    // 121 µs instead of 175 µs (0003 with its nested call) for a new aggregate, 152 µs instead of 181 µs for an
    // existing one. The rule itself (outbox_new_row_due, 0003) is unchanged and still used by enqueueMany.
    '0005_enqueue_inline': `
CREATE OR REPLACE FUNCTION ${s}.outbox_enqueue(
  p_event_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb, p_channel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  v_sequence bigint;
  v_blocked_reason text;
  v_due timestamptz;
BEGIN
  -- The counter row's lock orders the aggregate's writers until commit: sequence order is commit order.
  INSERT INTO ${s}.outbox_counter AS c (aggregate_type, aggregate_id, last_sequence)
  VALUES (p_aggregate_type, p_aggregate_id, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = c.last_sequence + 1
  RETURNING c.last_sequence INTO v_sequence;
  -- The lane is never locked here (DO NOTHING and a plain read take no row lock): an enqueue never waits on a
  -- relay holding the lane.
  IF v_sequence = 1 THEN
    INSERT INTO ${s}.outbox_lane (aggregate_type, aggregate_id) VALUES (p_aggregate_type, p_aggregate_id)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
      v_due := now();
    END IF;
  END IF;
  IF v_due IS NULL THEN
    SELECT l.blocked_reason INTO v_blocked_reason FROM ${s}.outbox_lane l
    WHERE l.aggregate_type = p_aggregate_type AND l.aggregate_id = p_aggregate_id;
    IF NOT FOUND THEN
      INSERT INTO ${s}.outbox_lane (aggregate_type, aggregate_id) VALUES (p_aggregate_type, p_aggregate_id)
      ON CONFLICT DO NOTHING;
    END IF;
    -- outbox_new_row_due's rule: a parked lane ('block') keeps the row out of the due index until a redrive, and
    -- behind a head in backoff the row must not look due.
    IF v_blocked_reason = 'exhausted' THEN
      v_due := 'infinity';
    ELSE
      v_due := greatest(now(), coalesce((
        SELECT p.available_at FROM ${s}.outbox p
        WHERE p.aggregate_type = p_aggregate_type AND p.aggregate_id = p_aggregate_id AND p.status = 'pending'
        ORDER BY p.sequence DESC LIMIT 1
      ), now()));
    END IF;
  END IF;
  INSERT INTO ${s}.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, payload, available_at)
  VALUES (p_event_id, p_aggregate_type, p_aggregate_id, v_sequence, p_event_type, p_payload, v_due);
  IF p_channel IS NOT NULL THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN v_sequence;
END
$fn$;
`,
    // outbox_claim_lanes again: the due scan skips leased lanes through a hashed set instead of an anti join that
    // the planner could turn into a nested loop over every leased lane per candidate row. With 256 lanes leased (a
    // 128-lane relay claiming ahead), that loop was 26 ms of a 31 ms claim of 64 lanes (auto_explain, PostgreSQL
    // 15); a claim of 16 lanes took 9–14 ms instead of 2–2.5 ms, which this version takes with or without leases.
    // Everything else is 0004's function unchanged.
    '0006_claim_hashed_busy': `
${claimLanesFunction(s, busyLanesHashed(s))}`,
    '0007_liveness': migration0007(schema),
  }
}

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
  return [`CREATE SCHEMA IF NOT EXISTS "${schema}";`, ...Object.values(migrationSteps(schema))].join('\n')
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
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) }) })
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
  const steps = migrationSteps(schema)
  const provider: MigrationProvider = {
    async getMigrations() {
      const migrations: Record<string, Migration> = {}
      for (const [name, text] of Object.entries(steps)) {
        migrations[name] = { up: async (trx) => void (await sql.raw(text).execute(trx)) }
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
