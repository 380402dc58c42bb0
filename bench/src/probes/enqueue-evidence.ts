import { enqueue, migrate } from '@outbox/producer'
import { openKysely, startPostgres } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import pg from 'pg'
import { createBusinessTables, insertBareEvent } from '../support/business-tables.js'

type Variant =
  | 'without enqueue'
  | 'bare INSERT'
  | 'bare INSERT + NOTIFY'
  | 'enqueue, NOTIFY off'
  | 'enqueue, NOTIFY on'
const VARIANTS: readonly Variant[] = [
  'without enqueue',
  'bare INSERT',
  'bare INSERT + NOTIFY',
  'enqueue, NOTIFY off',
  'enqueue, NOTIFY on',
]
const total = Number(process.argv[2] ?? 3000)

async function placeOrder(db: Kysely<any>, variant: Variant, n: number): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ id: string }>`
      INSERT INTO orders (customer_id, total_cents) VALUES (${`c${n % 10_000}`}, ${100 + n}) RETURNING id`.execute(
      trx,
    )
    if (variant === 'without enqueue') return
    const id = rows[0]!.id
    const payload = { order_id: id, customer_id: `c${n % 10_000}`, total_cents: 100 + n }
    if (variant.startsWith('bare')) {
      await insertBareEvent(trx, id, payload, variant === 'bare INSERT + NOTIFY')
      return
    }
    await enqueue(
      trx,
      { aggregateType: 'order', aggregateId: id, eventType: 'order.created', payload },
      { notify: variant === 'enqueue, NOTIFY on' },
    )
  })
}

const server = await startPostgres({
  fast: false,
  settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' },
})
try {
  const admin = new pg.Client({ connectionString: server.url() })
  await admin.connect()
  await admin.query('CREATE DATABASE probe')
  await admin.end()
  const url = server.url('probe')
  const setup = openKysely(url, { max: 1 })
  await migrate(setup)
  await sql`CREATE EXTENSION pg_stat_statements`.execute(setup)
  await createBusinessTables(setup)
  const sampler = new pg.Client({ connectionString: url })
  await sampler.connect()
  let n = 0
  for (const connections of [1, 8]) {
    const pool = openKysely(`${url}?application_name=probe`, { max: connections })
    for (const variant of VARIANTS) {
      // Warm the pool and the functions' plans.
      await Promise.all(Array.from({ length: connections }, () => placeOrder(pool, variant, n++)))
      await sql`CHECKPOINT`.execute(setup)
      await sql`SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')`.execute(setup)
      const waits = new Map<string, number>()
      let samples = 0
      let running = true
      const sampling = (async () => {
        while (running) {
          const { rows } = await sampler.query<{ wait: string }>(
            `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS wait FROM pg_stat_activity
             WHERE application_name = 'probe' AND state = 'active'`,
          )
          for (const { wait } of rows) waits.set(wait, (waits.get(wait) ?? 0) + 1)
          samples++
          await new Promise((resolve) => setTimeout(resolve, 1))
        }
      })()
      let next = 0
      const t0 = performance.now()
      await Promise.all(
        Array.from({ length: connections }, async () => {
          while (next < total) {
            next++
            await placeOrder(pool, variant, n++)
          }
        }),
      )
      const seconds = (performance.now() - t0) / 1000
      running = false
      await sampling
      const wal = (
        await sql<{ wal_records: string; wal_fpi: string; wal_bytes: string }>`
          SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal`.execute(setup)
      ).rows[0]!
      const statements = (
        await sql<{ query: string; calls: string; mean_us: number; total_ms: number }>`
          SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query, calls,
                 round((mean_exec_time * 1000)::numeric, 1)::float AS mean_us,
                 round(total_exec_time::numeric, 1)::float AS total_ms
          FROM pg_stat_statements WHERE calls >= ${total / 2} ORDER BY total_exec_time DESC LIMIT 8`.execute(
          setup,
        )
      ).rows
      const active = [...waits.values()].reduce((a, b) => a + b, 0)
      console.log(`\n== ${variant}, ${connections} conn: ${Math.round(total / seconds)} tx/s`)
      console.log(
        `   WAL per tx: ${(Number(wal.wal_records) / total).toFixed(1)} records, ${(Number(wal.wal_fpi) / total).toFixed(2)} full pages, ${Math.round(Number(wal.wal_bytes) / total)} bytes`,
      )
      console.log(
        `   backends active per sample: ${(active / samples).toFixed(2)}; of those: ${[...waits.entries()]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 6)
          .map(([wait, count]) => `${wait} ${((100 * count) / active).toFixed(0)}%`)
          .join(', ')}`,
      )
      for (const s of statements)
        console.log(`   ${String(s.mean_us).padStart(7)} µs × ${s.calls}  ${s.query}`)
    }
    await pool.destroy()
  }
  await sampler.end()
  await setup.destroy()
} finally {
  await server.stop()
}
