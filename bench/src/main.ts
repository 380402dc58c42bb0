// `pnpm bench [--quick] [--only=case,…]`: starts an embedded PostgreSQL, runs every case (each with its
// baselines in the same run), prints a table and writes bench/results/latest.json. Exits non-zero when a case
// crashes or an order check fails — never because a performance target was missed.
import { mkdir, writeFile } from 'node:fs/promises'
import { cpus, loadavg, totalmem } from 'node:os'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@outbox/test-harness'
import pg from 'pg'
import { backlogFairness } from './cases/backlog-fairness.js'
import { breakerCost } from './cases/breaker-cost.js'
import { claimAtScale } from './cases/claim-at-scale.js'
import { consumerOverhead } from './cases/consumer-overhead.js'
import { enqueueOverhead } from './cases/enqueue-overhead.js'
import { forgedFlood } from './cases/forged-flood.js'
import { hangingEndpoints } from './cases/hanging-endpoints.js'
import { isolation } from './cases/isolation.js'
import { latency } from './cases/latency.js'
import { pruneUnderLoad } from './cases/prune-under-load.js'
import { relayThroughput } from './cases/relay-throughput.js'
import { slowEndpoint } from './cases/slow-endpoint.js'
import { subscriptions } from './cases/subscriptions.js'
import type { BenchContext } from './support/context.js'
import { BenchDatabases } from './support/databases.js'
import { type CaseResult, renderTable } from './support/report.js'

/** Seed of every workload's random choices: the same work on every run and machine. */
const SEED = 20_261_202

const CASES: Record<string, (ctx: BenchContext) => Promise<CaseResult>> = {
  'relay-throughput': (ctx) => relayThroughput(ctx, false),
  'hot-aggregate': (ctx) => relayThroughput(ctx, true),
  'slow-endpoint': slowEndpoint,
  latency,
  'enqueue-overhead': enqueueOverhead,
  'consumer-overhead': consumerOverhead,
  'forged-flood': forgedFlood,
  'claim-at-scale': claimAtScale,
  'prune-under-load': pruneUnderLoad,
  subscriptions,
  isolation,
  'hanging-endpoints': hangingEndpoints,
  'breaker-cost': breakerCost,
  'backlog-fairness': backlogFairness,
}

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const only = args
  .find((arg) => arg.startsWith('--only='))
  ?.slice('--only='.length)
  .split(',')
const selected = Object.keys(CASES).filter((id) => !only || only.includes(id))

const startedAt = new Date()
// The machine may be shared: its load is recorded with the figures, as context for their noise.
const loadAtStart = loadavg()[0]!
const started = performance.now()
const log = (message: string) => process.stderr.write(`${message}\n`)
log(`outbox bench${quick ? ' --quick' : ''}: ${selected.join(', ')}`)

// Durable settings (fsync and synchronous_commit on, the server's defaults): commit cost is part of what the
// systems are compared on, so it must be the cost a production server pays.
const server = await startPostgres({ fast: false, maxConnections: 400 })
const databases = new BenchDatabases(server)
const results: CaseResult[] = []
let postgresVersion = ''
try {
  const client = new pg.Client({ connectionString: server.url() })
  await client.connect()
  postgresVersion = (await client.query<{ server_version: string }>('SHOW server_version')).rows[0]!
    .server_version
  await client.end()
  // Quick mode (CI) runs each system once, except where a case says runs are cheap; the full run takes 3.
  const ctx: BenchContext = { quick, seed: SEED, runs: quick ? 1 : 3, databases, log }
  for (const id of selected) {
    log(`\n[${id}]`)
    const t0 = performance.now()
    let result: CaseResult
    try {
      result = await CASES[id]!(ctx)
    } catch (error) {
      log(error instanceof Error ? (error.stack ?? error.message) : String(error))
      result = {
        id,
        title: id,
        measurements: [],
        comparisons: [],
        notes: [],
        seconds: 0,
        error: error instanceof Error ? error.message : String(error),
      }
    }
    result.seconds = (performance.now() - t0) / 1000
    results.push(result)
  }
} finally {
  await databases.dropAll()
  await server.stop()
}

const totalSeconds = (performance.now() - started) / 1000
const machine = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model ?? 'unknown',
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  postgres: postgresVersion,
  postgresSettings: 'embedded, durable (fsync on, synchronous_commit on)',
}
console.log(renderTable(results))
console.log(
  `\n${machine.cpus} vCPU ${machine.cpuModel}, Node ${machine.node}, PostgreSQL ${machine.postgres}; ${totalSeconds.toFixed(0)} s total; load average ${loadAtStart.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end`,
)

const failed = results.filter(
  (result) => result.error !== undefined || result.measurements.some((m) => m.order?.enforced && !m.order.ok),
)
const report = {
  startedAt: startedAt.toISOString(),
  quick,
  seed: SEED,
  runsPerSystem: quick ? 1 : 3,
  totalSeconds: Math.round(totalSeconds),
  loadAverage: { start: Number(loadAtStart.toFixed(1)), end: Number(loadavg()[0]!.toFixed(1)) },
  machine,
  cases: results,
}
const file = fileURLToPath(new URL(`../results/${quick ? 'quick' : 'latest'}.json`, import.meta.url))
await mkdir(fileURLToPath(new URL('../results/', import.meta.url)), { recursive: true })
await writeFile(file, `${JSON.stringify(report, null, 2)}\n`)
log(`wrote ${file}`)
if (failed.length > 0) {
  log(`FAILED: ${failed.map((result) => result.id).join(', ')} (a crash or an order check)`)
  process.exitCode = 1
}
