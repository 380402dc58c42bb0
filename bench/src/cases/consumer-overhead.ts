import { randomUUID } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { createConsumer, migrate } from '@outbox/consumer'
import { openKysely } from '@outbox/test-harness'
import express from 'express'
import { type Kysely, sql } from 'kysely'
import { Agent, request } from 'undici'
import type { BenchContext } from '../support/context.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { median } from '../support/stats.js'
import { now } from '../support/timing.js'

const AGGREGATES = 1000
const IN_FLIGHT = 16
/**
 * Blocks per path and run: the two handlers take turns on consecutive slices of the events, so drift on the
 * machine hits both alike (one block per handler once let a single slow stretch halve one handler's rate).
 */
const BLOCKS = 8
const PATHS = [
  ['apply', 'applied'],
  ['duplicate', 'duplicate_ignored'],
] as const

/** The app under test: `dedupe(handler)` and the hand-written equivalent of the guide's `apply_event`. */
function buildApp(db: Kysely<any>) {
  const { dedupe } = createConsumer({ db, allowUnsigned: true })
  const app = express()
  app.post(
    '/dedupe',
    dedupe<{ order_id: string; status: string }>(async (event, trx) => {
      await sql`UPDATE orders SET status = ${event.data.status} WHERE id = ${event.data.order_id}`.execute(
        trx,
      )
    }),
  )
  // The guide's apply_event behind Express: parse JSON, then in ONE transaction record the id (a conflict means
  // duplicate) and apply the effect.
  app.post('/manual', express.json(), async (req, res, next) => {
    try {
      const event = req.body as { event_id: string; data: { order_id: string; status: string } }
      const status = await db.transaction().execute(async (trx) => {
        const inserted = await sql`
          INSERT INTO manual_processed_events (event_id, received_at) VALUES (${event.event_id}, now())
          ON CONFLICT (event_id) DO NOTHING`.execute(trx)
        if (Number(inserted.numAffectedRows ?? 0) === 0) return 'duplicate_ignored'
        await sql`UPDATE orders SET status = ${event.data.status} WHERE id = ${event.data.order_id}`.execute(
          trx,
        )
        return 'applied'
      })
      res.json({ status })
    } catch (error) {
      next(error)
    }
  })
  return app
}

interface Request_ {
  readonly body: string
  readonly headers: Record<string, string>
}

function buildEvents(count: number): Request_[] {
  return Array.from({ length: count }, (_, n) => {
    const eventId = randomUUID()
    const aggregateId = String(n % AGGREGATES)
    const sequence = Math.floor(n / AGGREGATES) + 1
    const body = JSON.stringify({
      event_id: eventId,
      type: 'order.updated',
      aggregate_type: 'order',
      aggregate_id: aggregateId,
      sequence,
      occurred_at: new Date(0).toISOString(),
      data: { order_id: aggregateId, status: `s${sequence}` },
    })
    return {
      body,
      headers: {
        'content-type': 'application/json',
        'x-idempotency-key': eventId,
        'x-event-sequence': String(sequence),
      },
    }
  })
}

/** POSTs every request with IN_FLIGHT in flight; checks the answer's status; returns the seconds it took. */
async function load(
  agent: Agent,
  url: string,
  requests: readonly Request_[],
  expect: string,
): Promise<number> {
  let next = 0
  const t0 = now()
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < requests.length) {
        const { body, headers } = requests[next++]!
        const response = await request(url, { method: 'POST', body, headers, dispatcher: agent })
        const text = await response.body.text()
        if (response.statusCode !== 200 || !text.includes(`"${expect}"`)) {
          throw new Error(`${url} answered ${response.statusCode} ${text.slice(0, 200)} (expected ${expect})`)
        }
      }
    }),
  )
  return (now() - t0) / 1000
}

/**
 * Consumer overhead: `dedupe(handler)` against a hand-written Express handler doing the guide's `apply_event`
 * (dedupe insert + update in one transaction), in requests per second over keep-alive loopback HTTP, on the
 * apply path (new events, in order) and the duplicate path (the same events again). Both use one Kysely pool.
 * Within a run the handlers take turns in blocks; a handler's rate is its requests over its blocks' time.
 */
export async function consumerOverhead(ctx: BenchContext): Promise<CaseResult> {
  const count = ctx.quick ? 300 : 4000
  const events = buildEvents(count)
  const rates = new Map<string, number[]>()
  const template = await ctx.databases.create('tpl')
  try {
    const db = openKysely(ctx.databases.url(template), { max: 1 })
    await migrate(db)
    await sql`CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`.execute(db)
    await sql`INSERT INTO orders SELECT n::text, 'created' FROM generate_series(0, ${AGGREGATES - 1}) AS n`.execute(
      db,
    )
    await sql`CREATE TABLE manual_processed_events (event_id uuid PRIMARY KEY, received_at timestamptz NOT NULL)`.execute(
      db,
    )
    await db.destroy()
    for (let run = 0; run < ctx.runs; run++) {
      const name = await ctx.databases.create('run', template)
      const db = openKysely(ctx.databases.url(name), { max: 10 })
      const server = buildApp(db).listen(0, '127.0.0.1')
      await new Promise<void>((resolve) => server.once('listening', () => resolve()))
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
      const agent = new Agent({ connections: IN_FLIGHT, keepAliveTimeout: 30_000, pipelining: 1 })
      try {
        // Slices keep every aggregate's events in sequence order: slice k holds sequences after slice k - 1's.
        const perBlock = Math.ceil(events.length / BLOCKS)
        for (const [path, expect] of PATHS) {
          const seconds = new Map<string, number>()
          for (let block = 0; block < BLOCKS; block++) {
            const slice = events.slice(block * perBlock, (block + 1) * perBlock)
            const routes = (run + block) % 2 === 0 ? ['dedupe', 'manual'] : ['manual', 'dedupe']
            for (const route of routes) {
              const took = await load(agent, `${base}/${route}`, slice, expect)
              seconds.set(route, (seconds.get(route) ?? 0) + took)
            }
          }
          for (const route of ['dedupe', 'manual']) {
            const rate = events.length / seconds.get(route)!
            const key = `${route === 'dedupe' ? 'dedupe(handler)' : 'hand-written apply_event'}, ${path} path`
            rates.set(key, [...(rates.get(key) ?? []), rate])
            ctx.log(`  ${key}: ${Math.round(rate)} req/s`)
          }
        }
      } finally {
        await agent.close()
        server.closeAllConnections()
        await new Promise<void>((resolve) => server.close(() => resolve()))
        await db.destroy()
        await ctx.databases.drop(name)
      }
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const rate = (key: string) => median(rates.get(key)!)
  return {
    id: 'consumer-overhead',
    title: `Consumer overhead: ${count} webhooks over ${AGGREGATES} aggregates, ${IN_FLIGHT} in flight`,
    measurements: [...rates.entries()].map(([key, runs]) => measurement(key, 'req/s', runs)),
    comparisons: [
      compare(
        'dedupe ÷ hand-written, apply path',
        rate('dedupe(handler), apply path'),
        rate('hand-written apply_event, apply path'),
        { min: 0.8 },
      ),
      compare(
        'dedupe ÷ hand-written, duplicate path',
        rate('dedupe(handler), duplicate path'),
        rate('hand-written apply_event, duplicate path'),
      ),
      compare(
        'dedupe: duplicate ÷ apply path',
        rate('dedupe(handler), duplicate path'),
        rate('dedupe(handler), apply path'),
        { min: 1.5 },
      ),
    ],
    notes: ['no signing secret on either side (same work but the dedupe, cursor and envelope checks)'],
    seconds: 0,
  }
}
