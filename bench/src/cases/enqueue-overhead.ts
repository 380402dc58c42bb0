import { enqueue, migrate } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import type { BenchContext } from '../support/context.js'
import {
  type CaseResult,
  type Comparison,
  compare,
  type Measurement,
  measurement,
} from '../support/report.js'
import { median, seededRandom } from '../support/stats.js'
import { now } from '../support/timing.js'

type Variant = 'without enqueue' | 'enqueue, NOTIFY on' | 'enqueue, NOTIFY off'
const VARIANTS: readonly Variant[] = ['without enqueue', 'enqueue, NOTIFY on', 'enqueue, NOTIFY off']

/** The business transaction: insert one order, and (unless `without`) enqueue its `order.created` event. */
async function placeOrder(db: Kysely<any>, variant: Variant, customer: string, cents: number): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ id: string }>`
      INSERT INTO orders (customer_id, total_cents) VALUES (${customer}, ${cents}) RETURNING id`.execute(trx)
    if (variant === 'without enqueue') return
    const id = rows[0]!.id
    await enqueue(
      trx,
      {
        aggregateType: 'order',
        aggregateId: id,
        eventType: 'order.created',
        payload: { order_id: id, customer_id: customer, total_cents: cents },
      },
      { notify: variant === 'enqueue, NOTIFY on' },
    )
  })
}

/** Runs `total` business transactions over `connections` connections; returns transactions per second. */
async function drive(db: Kysely<any>, variant: Variant, connections: number, total: number, seed: number) {
  const random = seededRandom(seed)
  const orders = Array.from({ length: total }, () => ({
    customer: `c${Math.floor(random() * 10_000)}`,
    cents: 100 + Math.floor(random() * 100_000),
  }))
  let next = 0
  const t0 = now()
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (next < total) {
        const order = orders[next++]!
        await placeOrder(db, variant, order.customer, order.cents)
      }
    }),
  )
  return total / ((now() - t0) / 1000)
}

/**
 * Enqueue overhead: the same business transaction (insert one order) with and without `enqueue`, with NOTIFY on
 * and off, on 1 and 8 connections. The server is durable (every COMMIT flushes WAL), as in production; the
 * variants run in rotating order within each run so drift is spread evenly.
 */
export async function enqueueOverhead(ctx: BenchContext): Promise<CaseResult> {
  const perConnections = ctx.quick ? { 1: 100, 8: 240 } : { 1: 2000, 8: 6000 }
  const template = await ctx.databases.create('tpl')
  const rates = new Map<string, number[]>()
  try {
    const db = openKysely(ctx.databases.url(template), { max: 1 })
    await migrate(db)
    await sql`CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer_id text NOT NULL,
      total_cents integer NOT NULL, status text NOT NULL DEFAULT 'created', created_at timestamptz NOT NULL DEFAULT now())`.execute(
      db,
    )
    await db.destroy()
    for (let run = 0; run < ctx.runs; run++) {
      const name = await ctx.databases.create('run', template)
      try {
        for (const connections of [1, 8] as const) {
          const pool = openKysely(ctx.databases.url(name), { max: connections })
          try {
            // Warm the pool and the plan caches so the first variant pays no connection setup.
            await drive(pool, 'enqueue, NOTIFY off', connections, connections * 20, ctx.seed)
            for (let i = 0; i < VARIANTS.length; i++) {
              const variant = VARIANTS[(i + run) % VARIANTS.length]!
              const rate = await drive(
                pool,
                variant,
                connections,
                perConnections[connections],
                ctx.seed + run,
              )
              const key = `${variant}, ${connections} conn`
              rates.set(key, [...(rates.get(key) ?? []), rate])
              ctx.log(`  ${key}: ${Math.round(rate)} tx/s`)
            }
          } finally {
            await pool.destroy()
          }
        }
      } finally {
        await ctx.databases.drop(name)
      }
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const measurements: Measurement[] = []
  const comparisons: Comparison[] = []
  for (const connections of [1, 8]) {
    for (const variant of VARIANTS) {
      measurements.push(
        measurement(`${variant}, ${connections} conn`, 'tx/s', rates.get(`${variant}, ${connections} conn`)!),
      )
    }
    const base = median(rates.get(`without enqueue, ${connections} conn`)!)
    for (const variant of VARIANTS.slice(1)) {
      const with_ = median(rates.get(`${variant}, ${connections} conn`)!)
      comparisons.push(
        compare(`cost: ${variant}, ${connections} conn`, base, with_, connections === 1 ? { max: 1.5 } : {}),
      )
    }
  }
  return {
    id: 'enqueue-overhead',
    title: 'Enqueue overhead: a business transaction (insert one order) with vs without enqueue',
    measurements,
    comparisons,
    notes: ['cost = tx/s without enqueue ÷ tx/s with it (time per transaction, with ÷ without)'],
    seconds: 0,
  }
}
