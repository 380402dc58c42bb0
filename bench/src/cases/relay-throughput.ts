import { randomUUID } from 'node:crypto'
import { Relay, silentLogger, stats } from '@outbox/producer'
import { HEADERS, spliceEnvelope } from '@outbox/protocol'
import { openKysely } from '@outbox/test-harness'
import { seedGraphileBacklog, startGraphileDelivery } from '../../baselines/graphile-worker.js'
import { GuideRelay, runGuideRelay, seedGuideBacklog } from '../../baselines/guide-relay.js'
import {
  seedTransactionalOutboxBacklog,
  startTransactionalOutboxDelivery,
} from '../../baselines/transactional-outbox.js'
import type { BenchContext } from '../support/context.js'
import { type DeliveryRun, timeDelivery } from '../support/delivery-run.js'
import { createJsonPoster } from '../support/http-client.js'
import { type RelayProcess, seedOutboxBacklog, spawnRelayProcess } from '../support/outbox.js'
import { type CaseResult, compare, type Measurement, measurement } from '../support/report.js'
import { startTrackedSink } from '../support/sink.js'
import { median } from '../support/stats.js'
import { type Backlog, backlogEvent } from '../support/workload.js'

/** A delivery system under test: how to seed its backlog, and how to run it against a sink. */
interface System {
  readonly name: string
  /** Which schema it needs (systems of one kind share a migrated template). */
  readonly kind: string
  readonly seed: (url: string, backlog: Backlog) => Promise<void>
  /** Starts delivering to `endpoint`; resolves to its stop function. Arming that is not delivery comes first. */
  readonly run: (url: string, endpoint: string) => Promise<{ go: () => Promise<() => Promise<void>> }>
  /** Stop timing at this many seconds (too slow to drain the whole backlog sensibly). */
  readonly capMs: number
}

function ourRelayInProcess(name: string, capMs: number): System {
  return {
    name,
    kind: 'outbox',
    capMs,
    seed: seedOutboxBacklog,
    async run(url, endpoint) {
      return {
        async go() {
          const db = openKysely(url, { max: 10 })
          const relay = new Relay({ db, endpoint, logger: silentLogger })
          await relay.start()
          return async () => {
            await relay.stop({ timeoutMs: 5000 })
            const left = await stats(db)
            await db.destroy()
            if (left.pending > 0 && left.inFlight === 0) {
              // Not a failure of the run (it may be time-capped), but worth seeing.
              process.stderr.write(`  (${left.pending} events still pending after stop)\n`)
            }
          }
        },
      }
    },
  }
}

function ourRelayProcesses(name: string, processes: number, capMs: number): System {
  return {
    name,
    kind: 'outbox',
    capMs,
    seed: seedOutboxBacklog,
    async run(url, endpoint) {
      // Spawning and compiling takes a second or two: done before the clock starts; the relays wait for "go".
      const relays: RelayProcess[] = []
      try {
        for (let i = 0; i < processes; i++) relays.push(await spawnRelayProcess({ url, endpoint }))
      } catch (error) {
        await Promise.all(relays.map((relay) => relay.stop()))
        throw error
      }
      return {
        async go() {
          // Every relay is told at once; each starts within milliseconds (no LISTEN connection to open).
          await Promise.all(relays.map((relay) => relay.go()))
          return async () => {
            await Promise.all(relays.map((relay) => relay.stop()))
          }
        },
      }
    },
  }
}

/** The relay's default `concurrency`: the client ceiling is measured with as many requests in flight. */
const RELAY_CONCURRENCY = 16

/**
 * The client's ceiling: no database at all, the same backlog POSTed by {@link RELAY_CONCURRENCY} loops through the
 * relay's own sender on a pool configured like the relay's, with the body and headers the relay sends (the
 * envelope spliced around the payload's JSON, `x-idempotency-key`, `x-event-sequence`, unsigned as the in-process
 * relay here is). Aggregates are split between the loops, each sending its aggregates' events in sequence order,
 * so per-aggregate order holds as it must for the relay. What the relay does beyond this is its database work.
 */
const bareUndiciLoop = (capMs: number, backlog: Backlog): System => ({
  name: 'bare undici loop (no database)',
  kind: 'none',
  capMs,
  seed: async () => {},
  async run(_url, endpoint) {
    return {
      async go() {
        const poster = createJsonPoster(RELAY_CONCURRENCY)
        let stopped = false
        const occurredAt = new Date().toISOString()
        const loops = Array.from({ length: RELAY_CONCURRENCY }, async (_, loop) => {
          for (let n = 0; n < backlog.events && !stopped; n++) {
            const event = backlogEvent(backlog, n)
            if (Number(event.aggregateId) % RELAY_CONCURRENCY !== loop) continue
            const eventId = randomUUID()
            const body = spliceEnvelope(
              {
                eventId,
                type: event.eventType,
                aggregateType: 'order',
                aggregateId: event.aggregateId,
                sequence: event.sequence,
                occurredAt,
              },
              JSON.stringify(event.payload),
            )
            await poster.post(endpoint, body, {
              'user-agent': 'outbox-relay',
              [HEADERS.idempotencyKey]: eventId,
              [HEADERS.eventSequence]: String(event.sequence),
            })
          }
        })
        const all = Promise.all(loops)
        return async () => {
          stopped = true
          await all
          await poster.close()
        }
      },
    }
  },
})

const guideRelay = (capMs: number): System => ({
  name: '(a) guide relay (run_once)',
  kind: 'guide',
  capMs,
  seed: seedGuideBacklog,
  async run(url, endpoint) {
    return {
      async go() {
        const poster = createJsonPoster(1)
        const { default: pg } = await import('pg')
        const conn = new pg.Client({ connectionString: url })
        await conn.connect()
        let stopped = false
        const loop = runGuideRelay(new GuideRelay(conn, poster, endpoint), () => stopped)
        return async () => {
          stopped = true
          await loop
          await conn.end()
          await poster.close()
        }
      },
    }
  },
})

const graphileWorker = (capMs: number): System => ({
  name: '(b) graphile-worker 0.17.3',
  kind: 'graphile',
  capMs,
  seed: seedGraphileBacklog,
  async run(url, endpoint) {
    return {
      async go() {
        const poster = createJsonPoster(16)
        const worker = await startGraphileDelivery({ url, endpoint, poster })
        return async () => {
          await worker.stop()
          await poster.close()
        }
      },
    }
  },
})

const transactionalOutbox = (capMs: number): System => ({
  name: '(c) pg-transactional-outbox 0.5.7',
  kind: 'pto',
  capMs,
  seed: seedTransactionalOutboxBacklog,
  async run(url, endpoint) {
    return {
      async go() {
        const poster = createJsonPoster(128)
        const shutdown = startTransactionalOutboxDelivery({ url, endpoint, poster })
        return async () => {
          await shutdown()
          await poster.close()
        }
      },
    }
  },
})

async function runOnce(ctx: BenchContext, system: System, template: string, backlog: Backlog) {
  const name = await ctx.databases.create('run', template)
  const url = ctx.databases.url(name)
  const sink = await startTrackedSink({ expected: backlog.events })
  try {
    const armed = await system.run(url, sink.url)
    return await timeDelivery(sink, system.capMs, armed.go)
  } finally {
    await sink.close()
    await ctx.databases.drop(name)
  }
}

/**
 * Relay throughput (1,000 aggregates) or hot aggregate (one aggregate): every system drains the same backlog into
 * the same loopback sink answering at once; runs interleave system by system so drift hits all alike.
 */
export async function relayThroughput(ctx: BenchContext, hot: boolean): Promise<CaseResult> {
  const events = ctx.quick ? (hot ? 400 : 600) : 20_000
  const backlog: Backlog = { events, aggregates: hot ? 1 : ctx.quick ? 60 : 1000 }
  const fullCap = ctx.quick ? 10_000 : 180_000
  // (b) and (c) get a fixed time window when they cannot drain the backlog in it: on one aggregate graphile-worker
  // runs one job per poll and pg-transactional-outbox one message per poll; on 1,000 they need minutes here. Their
  // rate over the window is steady, so the ratio stands; the window only bounds the run time.
  const slowCap = hot ? (ctx.quick ? 2000 : 20_000) : ctx.quick ? 10_000 : 60_000
  const bare = hot ? undefined : bareUndiciLoop(fullCap, backlog)
  const systems: System[] = [
    ourRelayInProcess('outbox relay ×1 (in-process)', fullCap),
    ...(bare ? [bare] : []),
    ...(hot || ctx.quick ? [] : [ourRelayProcesses('outbox relay ×1 (own process)', 1, fullCap)]),
    ourRelayProcesses('outbox relay ×2 (2 processes)', 2, fullCap),
    guideRelay(fullCap),
    graphileWorker(slowCap),
    transactionalOutbox(slowCap),
  ]
  const templates = new Map<System, string>()
  const runs = new Map<System, DeliveryRun[]>()
  try {
    for (const system of systems) {
      const schema = await ctx.databases.schemaTemplate(system.kind, (url) =>
        system.seed(url, { events: 0, aggregates: 1 }),
      )
      const name = await ctx.databases.create('tpl', schema)
      await system.seed(ctx.databases.url(name), backlog)
      templates.set(system, name)
      runs.set(system, [])
    }
    for (let run = 0; run < ctx.runs; run++) {
      for (const system of systems) {
        const result = await runOnce(ctx, system, templates.get(system)!, backlog)
        runs.get(system)!.push(result)
        ctx.log(
          `  ${system.name}: ${Math.round(result.perSecond)} events/s (${result.order.received} in ${result.seconds.toFixed(2)} s)`,
        )
      }
    }
  } finally {
    for (const name of templates.values()) await ctx.databases.drop(name)
  }

  const measurements: Measurement[] = systems.map((system) => {
    const list = runs.get(system)!
    return measurement(
      system.name,
      'events/s',
      list.map((run) => run.perSecond),
      { order: list.map((run) => run.order), enforceOrder: system.kind === 'outbox' },
    )
  })
  const rate = (system: System) => median(runs.get(system)!.map((run) => run.perSecond))
  const ours1 = systems[0]!
  const ours2 = systems.find((system) => system.name.startsWith('outbox relay ×2'))!
  const [a, b, c] = systems.slice(-3) as [System, System, System]
  const comparisons = hot
    ? [
        compare('relay ×1 ÷ (a)', rate(ours1), rate(a), { min: 2.5 }),
        compare('relay ×1 ÷ (b)', rate(ours1), rate(b)),
        compare('relay ×1 ÷ (c)', rate(ours1), rate(c)),
        compare('relay ×2 ÷ (a)', rate(ours2), rate(a)),
      ]
    : [
        compare('relay ×1 ÷ (a)', rate(ours1), rate(a), { min: 6 }),
        compare('relay ×1 ÷ (b)', rate(ours1), rate(b), { min: 20 }),
        compare('relay ×1 ÷ (c)', rate(ours1), rate(c), { min: 5 }),
        compare('relay ×2 ÷ (a)', rate(ours2), rate(a), { min: 6 }),
        compare('relay ×2 ÷ (b)', rate(ours2), rate(b), { min: 10 }),
        compare('relay ×2 ÷ (c)', rate(ours2), rate(c), { min: 5 }),
        // The client's ceiling: the same requests with no database (same client settings, same sink, same run).
        compare('relay ×1 (in-process) ÷ bare undici loop', rate(ours1), rate(bare!), { min: 0.85 }),
      ]
  return {
    id: hot ? 'hot-aggregate' : 'relay-throughput',
    title: hot
      ? `Hot aggregate: ${events} events on ONE aggregate, 0 ms sink`
      : `Relay throughput: ${events} events over ${backlog.aggregates} aggregates, 0 ms sink`,
    measurements,
    comparisons,
    notes: [`(b) and (c) are timed over at most ${slowCap / 1000} s (what arrived by then ÷ the time)`],
    seconds: 0,
  }
}
