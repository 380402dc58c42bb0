// Baseline (b): graphile-worker 0.17 (the newest release that runs on Node 20) delivering the same webhooks. Its
// way of keeping per-aggregate order is one named job queue per aggregate: a queue runs one job at a time, in job
// order. Concurrency 16 like our relay; no `localQueue` (it breaks named-queue order); completion batching on.
import { randomUUID } from 'node:crypto'
import { Logger, makeWorkerUtils, type Runner, run, runMigrations } from 'graphile-worker'
import pg from 'pg'
import type { JsonPoster } from '../src/support/http-client.js'
import { type Backlog, backlogEvent } from '../src/support/workload.js'

/** What a job carries: exactly the webhook body it will POST. */
export interface DeliverPayload {
  readonly event_id: string
  readonly type: string
  readonly aggregate_type: string
  readonly aggregate_id: string
  readonly sequence: number
  readonly data: Record<string, unknown>
}

/** A logger that keeps graphile-worker quiet except for errors. */
export const quietLogger = new Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`[graphile-worker] ${message}\n`)
})

/** The queue of an aggregate: one named queue per aggregate keeps its jobs in order. */
export function queueOf(aggregateId: string): string {
  return `order:${aggregateId}`
}

/** Installs graphile-worker's schema and adds the backlog as jobs (public `addJobs`, in job-id = sequence order). */
export async function seedGraphileBacklog(url: string, backlog: Backlog): Promise<void> {
  const pgPool = new pg.Pool({ connectionString: url, max: 2 })
  pgPool.on('error', () => {})
  try {
    await runMigrations({ pgPool, logger: quietLogger })
    const utils = await makeWorkerUtils({ pgPool, logger: quietLogger })
    try {
      const chunk = 1000
      for (let start = 0; start < backlog.events; start += chunk) {
        const specs = []
        for (let n = start; n < Math.min(backlog.events, start + chunk); n++) {
          const event = backlogEvent(backlog, n)
          const payload: DeliverPayload = {
            event_id: randomUUID(),
            type: event.eventType,
            aggregate_type: 'order',
            aggregate_id: event.aggregateId,
            sequence: event.sequence,
            data: event.payload,
          }
          specs.push({ identifier: 'deliver', payload, queueName: queueOf(event.aggregateId) })
        }
        await utils.addJobs(specs)
      }
    } finally {
      await utils.release()
    }
    await pgPool.query('VACUUM ANALYZE graphile_worker._private_jobs')
  } finally {
    await pgPool.end()
  }
}

/** Settings of a graphile-worker delivery run. */
export interface GraphileDeliveryOptions {
  readonly url: string
  readonly endpoint: string
  readonly poster: JsonPoster
  readonly concurrency?: number
  /** graphile-worker's completion batching window; `-1` turns it off. */
  readonly completeJobBatchDelay?: number
  /** Called when a job starts, before its POST (add→start latency). */
  readonly onStart?: (payload: DeliverPayload) => void
}

/** A running graphile-worker pool; `stop()` shuts it down gracefully and ends its connections. */
export interface GraphileDelivery {
  stop(): Promise<void>
}

/** Starts graphile-worker with a `deliver` task that POSTs the job's payload and fails the job on a non-2xx. */
export async function startGraphileDelivery(options: GraphileDeliveryOptions): Promise<GraphileDelivery> {
  const concurrency = options.concurrency ?? 16
  // graphile-worker's advice: a pool of at least concurrency + 2.
  const pgPool = new pg.Pool({ connectionString: options.url, max: concurrency + 4 })
  pgPool.on('error', () => {})
  let runner: Runner
  try {
    runner = await run({
      pgPool,
      concurrency,
      noHandleSignals: true,
      logger: quietLogger,
      taskList: {
        deliver: async (raw) => {
          const payload = raw as DeliverPayload
          options.onStart?.(payload)
          await options.poster.post(options.endpoint, JSON.stringify(payload), {
            'x-idempotency-key': payload.event_id,
            'x-event-sequence': String(payload.sequence),
          })
        },
      },
      preset: { worker: { completeJobBatchDelay: options.completeJobBatchDelay ?? 0 } },
    })
  } catch (error) {
    await pgPool.end()
    throw error
  }
  return {
    async stop() {
      try {
        await runner.stop()
      } finally {
        await pgPool.end()
      }
    },
  }
}
