import { randomUUID } from 'node:crypto'
import { notifyChannel } from '@outbox/producer'
import { type Kysely, sql, type Transaction } from 'kysely'

/**
 * The enqueue measurements' business table (`orders`, what every variant's transaction inserts into) and the floor's
 * table (`bare_events`: the event row with no index, no counter and no lane).
 */
export async function createBusinessTables(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer_id text NOT NULL,
    total_cents integer NOT NULL, status text NOT NULL DEFAULT 'created', created_at timestamptz NOT NULL DEFAULT now())`.execute(
    db,
  )
  await sql`CREATE TABLE bare_events (event_id uuid NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL,
    payload jsonb NOT NULL)`.execute(db)
}

/**
 * The floor of any outbox that writes its event in a statement of its own: the event row INSERTed into
 * `bare_events`; with `notify`, and a `pg_notify` on the outbox's channel in the SAME statement, as enqueue's NOTIFY
 * travels in its one call (the floor of an outbox woken by NOTIFY).
 */
export async function insertBareEvent(
  trx: Transaction<any>,
  aggregateId: string,
  payload: unknown,
  notify: boolean,
): Promise<void> {
  const insert = sql`
    INSERT INTO bare_events (event_id, aggregate_id, event_type, payload)
    VALUES (${randomUUID()}, ${aggregateId}, 'order.created', ${JSON.stringify(payload)}::jsonb)`
  if (!notify) await insert.execute(trx)
  else
    await sql`WITH e AS (${insert} RETURNING 1) SELECT pg_notify(${notifyChannel()}, '') FROM e`.execute(trx)
}
