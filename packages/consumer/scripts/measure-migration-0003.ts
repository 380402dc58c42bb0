/**
 * Measures what migration 0003 (rows keyed by source) locks and for how long, on tables of a given size: a
 * one-off measurement for the README's upgrade section, not a test and not a benchmark case.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
 *     npx tsx --conditions=@outbox/source packages/consumer/scripts/measure-migration-0003.ts 100000 1000000
 *
 * For each size it creates a database, migrates it to 0002, fills `processed_events` with that many rows (ten per
 * aggregate, so a cursor per ten rows), vacuums, then runs migration 0003's text in a transaction while a second
 * connection lists the locks the migrating backend holds (and notes when it moves on from `processed_events` to
 * `consumer_cursors`) and a third, standing for a delivery, inserts an id and reports how long it waited. The database is dropped afterwards.
 */
import pg from 'pg'
import { consumerMigrations } from '../src/migrations/index.js'

const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const sizes = process.argv.slice(2).map(Number)
if (sizes.length === 0 || sizes.some((size) => !Number.isSafeInteger(size) || size < 1)) {
  console.error('usage: measure-migration-0003.ts <rows> [<rows> …]')
  process.exit(2)
}

const withDatabase = (url: string, database: string) => {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}
const migration = (name: string) => {
  const found = consumerMigrations.find((candidate) => candidate.name.startsWith(name))
  if (found === undefined) throw new Error(`no migration ${name}`)
  return found.sql('public')
}

async function measure(rows: number): Promise<void> {
  const name = `outbox_measure_0003_${process.pid}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  await admin.query(`CREATE DATABASE ${name}`)
  const url = withDatabase(adminUrl, name)
  const [migrating, observer, delivery] = [0, 1, 2].map(() => new pg.Client({ connectionString: url }))
  try {
    for (const client of [migrating!, observer!, delivery!]) await client.connect()
    await migrating!.query(migration('0001') + migration('0002'))
    const aggregates = Math.max(1, Math.floor(rows / 10))
    await migrating!.query(
      `INSERT INTO processed_events (event_id, aggregate_type, aggregate_id, sequence, type, received_at)
       SELECT gen_random_uuid(), 'order', (i % $2::int)::text, i / $2::int + 1, 'order.updated', now() - make_interval(secs => $1::int - i)
       FROM generate_series(1, $1::int) AS i`,
      [rows, aggregates],
    )
    await migrating!.query(
      `INSERT INTO consumer_cursors (aggregate_type, aggregate_id, last_sequence)
       SELECT 'order', i::text, 10 FROM generate_series(0, $1::int - 1) AS i`,
      [aggregates],
    )
    await migrating!.query('VACUUM ANALYZE processed_events, consumer_cursors')
    const size = await observer!.query<{ events: string; cursors: string }>(
      `SELECT pg_size_pretty(pg_total_relation_size('processed_events')) AS events,
              pg_size_pretty(pg_total_relation_size('consumer_cursors')) AS cursors`,
    )
    const { rows: pidRows } = await migrating!.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
    const pid = pidRows[0]!.pid

    await migrating!.query('BEGIN')
    const started = performance.now()
    const running = migrating!.query(migration('0003'))
    // A delivery arriving once the migration holds processed_events: it waits until the migration commits.
    let lockedAt = 0
    for (;;) {
      const { rows: held } = await observer!.query(
        `SELECT 1 FROM pg_locks WHERE pid = $1 AND granted AND mode = 'AccessExclusiveLock'
           AND relation = 'processed_events'::regclass`,
        [pid],
      )
      if (held.length > 0) {
        lockedAt = performance.now()
        break
      }
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    // When the migration moves on to consumer_cursors: processed_events' rewrite and key are done by then.
    let cursorsAt = 0
    const watching = (async () => {
      for (;;) {
        const { rows: held } = await observer!.query(
          `SELECT 1 FROM pg_locks WHERE pid = $1 AND granted AND mode = 'AccessExclusiveLock'
             AND relation = 'consumer_cursors'::regclass`,
          [pid],
        )
        if (held.length > 0) {
          cursorsAt = performance.now()
          return
        }
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    })()
    const waited = delivery!
      .query(
        `INSERT INTO processed_events (event_id, aggregate_type, aggregate_id, sequence, type)
         VALUES (gen_random_uuid()::text, 'order', 'during', 1, 'order.updated')`,
      )
      .then(() => performance.now() - lockedAt)
    await running
    const statementsMs = performance.now() - started
    await watching
    const { rows: locks } = await observer!.query<{ relation: string; mode: string }>(
      `SELECT c.relname AS relation, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
       WHERE l.pid = $1 AND l.granted AND c.relname IN ('processed_events', 'consumer_cursors')
         AND l.mode = 'AccessExclusiveLock' ORDER BY c.relname`,
      [pid],
    )
    await migrating!.query('COMMIT')
    const totalMs = performance.now() - started
    const waitedMs = await waited
    console.log(
      JSON.stringify({
        rows,
        cursors: aggregates,
        sizeBefore: size.rows[0],
        migrationMs: Math.round(statementsMs),
        processedEventsPhaseMs: Math.round(cursorsAt - started),
        withCommitMs: Math.round(totalMs),
        accessExclusive: locks.map((lock) => lock.relation),
        deliveryWaitedMs: Math.round(waitedMs),
      }),
    )
  } finally {
    for (const client of [migrating, observer, delivery]) await client?.end().catch(() => {})
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.end()
  }
}

const { rows: version } = await (async () => {
  const client = new pg.Client({ connectionString: adminUrl })
  await client.connect()
  try {
    return await client.query<{ server_version: string }>('SHOW server_version')
  } finally {
    await client.end()
  }
})()
console.log(`PostgreSQL ${version[0]?.server_version}`)
for (const rows of sizes) await measure(rows)
