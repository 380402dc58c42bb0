// The subscriber in its own OS process: `dedupe(handler)` in an Express app, SIGKILLed and restarted at random.
// Its effect is deliberately NOT idempotent by itself — an append-only log without a unique key and a counter —
// so anything dedupe lets through twice shows up in the database.
import { createServer } from 'node:http'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { createConsumer, type SequencePolicy } from '@outbox/consumer'
import express from 'express'
import { sql } from 'kysely'
import { openDatabase, readConfig, send, waitForStart } from './child-support.js'

/** What the orchestrator passes to the subscriber process. */
export interface SubscriberProcessConfig {
  readonly url: string
  readonly port: number
  readonly secret: string
  readonly sequence: SequencePolicy
}

/** The payload every chaos event carries (written by the producer workers). */
interface ChaosPayload {
  readonly tag: string
  readonly poison?: boolean
}

const config = readConfig<SubscriberProcessConfig>()
await waitForStart()
const db = openDatabase(config.url, 20)
const quiet = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} }
const { dedupe } = createConsumer({ db, secret: config.secret, sequence: config.sequence, logger: quiet })

const stats = { requests: 0, maxConcurrent: 0 }
let concurrent = 0
const app = express()
// A figure only: how many requests the subscriber works on at once (duplicates of a slow event wait on its
// processed_events row, each holding a pooled connection).
app.use((_req, res, next) => {
  stats.requests += 1
  concurrent += 1
  stats.maxConcurrent = Math.max(stats.maxConcurrent, concurrent)
  res.once('close', () => {
    concurrent -= 1
  })
  next()
})
app.post(
  '/hooks',
  dedupe<ChaosPayload>(async (event, trx) => {
    // A poison event fails in the handler forever, as a bug in the subscriber would.
    if (event.data.poison === true) throw new Error(`poison event ${event.data.tag}`)
    await sql`
      INSERT INTO applied_log (event_id, aggregate_type, aggregate_id, sequence, tag)
      VALUES (${event.eventId}, ${event.aggregateType}, ${event.aggregateId}, ${event.sequence}, ${event.data.tag})`.execute(
      trx,
    )
    await sql`
      INSERT INTO aggregate_counter (aggregate_type, aggregate_id, applied) VALUES (${event.aggregateType}, ${event.aggregateId}, 1)
      ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET applied = aggregate_counter.applied + 1`.execute(
      trx,
    )
  }),
)

// The port stays the same across restarts (the proxy forwards to it); a port the killed incarnation's socket still
// holds is retried for a bounded while.
for (let attempt = 1; ; attempt++) {
  try {
    await new Promise<void>((resolve, reject) => {
      const server = createServer(app)
      server.keepAliveTimeout = 30_000
      server.once('error', reject)
      server.listen(config.port, '127.0.0.1', () => resolve())
    })
    break
  } catch (error) {
    if (attempt >= 50) throw error
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
const lag = monitorEventLoopDelay({ resolution: 20 })
lag.enable()
setInterval(() => send({ stats: { ...stats, loopLagMaxMs: Math.round(lag.max / 1e6) } }), 200)
send({ ready: true })
process.once('SIGTERM', async () => {
  await db.destroy()
  process.exit(0)
})
