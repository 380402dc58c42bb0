import { migrate as migrateConsumer } from '@outbox/consumer'
import { migrate as migrateProducer } from '@outbox/producer'
import { type Kysely, sql } from 'kysely'

/**
 * The producer side's business tables next to the outbox: `orders` (a version per order, bumped by every change)
 * and `order_changes` (one row per event, keyed by the event's tag), so "the event commits if and only if the
 * business write does" can be checked row by row.
 */
export async function prepareProducerDatabase(db: Kysely<any>): Promise<void> {
  await migrateProducer(db)
  await sql`
    CREATE TABLE orders (id text PRIMARY KEY, version integer NOT NULL);
    CREATE TABLE order_changes (tag text PRIMARY KEY, order_id text NOT NULL, aggregate_type text NOT NULL)`.execute(
    db,
  )
}

/**
 * The subscriber's effect tables. `applied_log` is append-only with NO unique key on the event, and
 * `aggregate_counter` only ever adds one: neither is idempotent, so a second apply of any event is visible.
 */
export async function prepareSubscriberDatabase(db: Kysely<any>): Promise<void> {
  await migrateConsumer(db)
  await sql`
    CREATE TABLE applied_log (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      event_id uuid NOT NULL,
      aggregate_type text NOT NULL,
      aggregate_id text NOT NULL,
      sequence bigint NOT NULL,
      tag text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE aggregate_counter (
      aggregate_type text NOT NULL,
      aggregate_id text NOT NULL,
      applied integer NOT NULL,
      PRIMARY KEY (aggregate_type, aggregate_id)
    )`.execute(db)
}
