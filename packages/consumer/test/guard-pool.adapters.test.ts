import { type RunningPostgres, startPostgres } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, createPool, migrate, silentLogger } from '../src/index.js'
import { ADAPTERS, type Running, startServer } from './servers.js'
import { createEffects, delivery, makeEvent, post, recorded, writeEffect } from './support.js'

// This suite stops and starts PostgreSQL, so it always runs its own embedded server, whatever DATABASE_URL says.
let server: RunningPostgres
/** The test's own view of the database, on a guarded pool too: its idle connections are cut by the restarts. */
let db: Kysely<any>

beforeAll(async () => {
  server = await startPostgres()
  db = new Kysely({
    dialect: new PostgresDialect({ pool: createPool({ connectionString: server.url() }, silentLogger) }),
  })
  await migrate(db)
  await createEffects(db)
}, 60_000)

afterAll(async () => {
  await db?.destroy()
  await server?.stop()
})

const running: { server: Running; db: Kysely<any> }[] = []
afterEach(async () => {
  for (const { server: http, db: consumerDb } of running.splice(0)) {
    await http.close()
    await consumerDb.destroy()
  }
})

/** Waits until a handler's `pg_sleep` runs in PostgreSQL (a condition, with a generous ceiling). */
async function handlerSleeping(): Promise<number> {
  const giveUp = Date.now() + 30_000
  for (;;) {
    const { rows } = await sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'select pg_sleep(%'`.execute(db)
    if (rows[0] !== undefined) return rows[0].pid
    if (Date.now() > giveUp) throw new Error('the handler never reached pg_sleep')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** A consumer on a guarded pool whose handler, on an event's first delivery, sleeps in PostgreSQL until cut. */
async function consumerOn(adapter: (typeof ADAPTERS)[number]) {
  const consumerDb = new Kysely<any>({
    dialect: new PostgresDialect({
      pool: createPool({ connectionString: server.url(), max: 4 }, silentLogger),
    }),
  })
  const consumer = createConsumer({ db: consumerDb, allowUnsigned: true, logger: silentLogger })
  const blocked = new Set<string>()
  const http = await startServer(adapter, consumer, {
    handler: async (event, trx) => {
      await writeEffect(trx, event)
      if (!blocked.has(event.eventId)) {
        blocked.add(event.eventId)
        await sql`select pg_sleep(600)`.execute(trx)
      }
    },
  })
  running.push({ server: http, db: consumerDb })
  return http
}

const cuts = {
  'a terminated backend': async () => {
    const pid = await handlerSleeping()
    await sql`SELECT pg_terminate_backend(${pid})`.execute(db)
  },
  'a PostgreSQL restart': async () => {
    await handlerSleeping()
    await server.restart()
  },
} as const

describe('every adapter on createPool survives the database cutting a handler’s connection', () => {
  for (const adapter of ADAPTERS) {
    for (const [name, cut] of Object.entries(cuts)) {
      it(`${name} (${adapter}): 5xx, nothing recorded, the process alive, the next delivery applied`, async () => {
        const http = await consumerOn(adapter)
        const event = makeEvent({ aggregateId: `cut-${adapter}-${name.replaceAll(' ', '-')}` })
        const { body, headers } = delivery(event)

        const answering = post(http.url, body, headers)
        await cut()
        const answer = await answering
        expect(answer.status).toBeGreaterThanOrEqual(500)
        expect(answer.json).toMatchObject({ code: 'handler_failed' })
        expect(await recorded(db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })

        // This process is the consumer's: reaching this line is it staying alive. The sender's retry applies.
        const again = await post(http.url, body, headers)
        expect(again.json).toEqual({ status: 'applied', eventId: event.eventId })
        expect(await recorded(db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
      })
    }
  }
})
