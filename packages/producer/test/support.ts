import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { checkIntegrity, enqueue } from '../src/index.js'

/** Enqueues `count` events for each aggregate id, each in its own transaction, in round-robin order. */
export async function seedEvents(
  db: Kysely<any>,
  aggregates: readonly string[],
  count: number,
  options: { aggregateType?: string; schema?: string } = {},
): Promise<void> {
  for (let n = 0; n < count; n++) {
    await Promise.all(
      aggregates.map((id) =>
        db.transaction().execute((trx) =>
          enqueue(
            trx,
            {
              aggregateType: options.aggregateType ?? 'order',
              aggregateId: id,
              eventType: 'order.updated',
              payload: { id, n },
            },
            { schema: options.schema },
          ),
        ),
      ),
    )
  }
}

/**
 * Polls until `check` returns true or `timeoutMs` passes; throws with `what` on time-out. The default ceiling is
 * generous: it catches a condition that never comes, and a loaded machine must not reach it.
 */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
): Promise<void> {
  const start = Date.now()
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** Millisecond retry schedule with many attempts: random-failure tests are then not flaky. */
export const FAST_SCHEDULE: readonly number[] = Array.from({ length: 30 }, () => 5)

/** A promise with its resolve function outside (Node 20 has no Promise.withResolvers). */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((settle) => {
    resolve = settle
  })
  return { promise, resolve }
}

/** Resolves once `count` sessions of this database wait for a lock (throws after 10 s). */
export async function waitForLockWaiters(db: Kysely<any>, count = 1): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
    const { rows } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(db)
    if (Number(rows[0]?.n) >= count) return
  }
  throw new Error(`fewer than ${count} sessions ever waited for a lock`)
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** The outbox rows of one aggregate, in sequence order, as [sequence, status, available_at is infinity]. */
export async function laneRows(db: Kysely<any>, aggregateId: string, aggregateType = 'order') {
  const { rows } = await sql<{ sequence: string; status: string; at_infinity: boolean }>`
    SELECT sequence, status, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE aggregate_type = ${aggregateType} AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(db)
  return rows.map((row) => [Number(row.sequence), row.status, row.at_infinity] as const)
}

/** Asserts every liveness rule holds: no lane of this outbox can be left unable to move. */
export async function expectLanesLive(db: Kysely<any>): Promise<void> {
  const { violations } = await checkIntegrity(db)
  if (violations.length > 0) throw new Error(`checkIntegrity: ${JSON.stringify(violations)}`)
}

/** The implicit subscription's id: the relay's `endpoint`, and every row of a single-endpoint outbox. */
export const IMPLICIT_SUBSCRIPTION = '00000000-0000-0000-0000-000000000000'

/**
 * Stores one subscription per name, straight into `outbox_subscription` (each with a URL of its own, a tenant when
 * given), and disables the implicit one so that enqueued events go to these alone. Returns their ids by name.
 */
export async function storeSubscriptions(
  db: Kysely<any>,
  subscriptions: Readonly<Record<string, { readonly url?: string; readonly tenant?: string }>>,
  options: { schema?: string } = {},
): Promise<Record<string, string>> {
  const table = sql.id(options.schema ?? 'public', 'outbox_subscription')
  await sql`UPDATE ${table} SET state = 'disabled' WHERE id = ${IMPLICIT_SUBSCRIPTION}::uuid`.execute(db)
  const ids: Record<string, string> = {}
  for (const [name, { url, tenant }] of Object.entries(subscriptions)) {
    const { rows } = await sql<{ id: string }>`
      INSERT INTO ${table} (name, url, tenant) VALUES (${name}, ${url ?? `http://127.0.0.1:9/${name}`}, ${tenant ?? null})
      RETURNING id`.execute(db)
    ids[name] = rows[0]!.id
  }
  return ids
}

/** A sample's value in a Prometheus text exposition (`labels` as written, e.g. `{to="open"}`), or undefined. */
export function metricValue(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((one) => one.startsWith(`${name}${labels} `))
  return line === undefined ? undefined : Number(line.split(' ')[1])
}

/** A Kysely instance on its own pool (4 connections) that counts the relay's claims (calls of the claim function). */
export function countingClaims(url: string): { db: Kysely<any>; claims: () => number } {
  let claims = 0
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  pool.on('error', () => {})
  const db = new Kysely<any>({
    dialect: new PostgresDialect({ pool }),
    log(event) {
      // The claim of one subscription (migration 0017's) or of several (0012's).
      if (/outbox_claim_(single_)?subscription_lanes/.test(event.query.sql)) claims++
    },
  })
  return { db, claims: () => claims }
}

/**
 * The rows and index entries of the outbox that this backend's transaction has read so far (its own counters, which
 * also hold reads not yet flushed to the statistics): read it before and after a statement in one transaction.
 */
export async function outboxRowsRead(trx: Kysely<any>): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    SELECT sum(pg_stat_get_xact_tuples_returned(c.oid) + pg_stat_get_xact_tuples_fetched(c.oid)) AS n
    FROM pg_class c
    WHERE c.oid = 'outbox'::regclass
       OR c.oid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = 'outbox'::regclass)`.execute(trx)
  return Number(rows[0]!.n)
}
