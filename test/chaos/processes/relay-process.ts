// A relay in its own OS process, killed with SIGKILL by the orchestrator at random moments. Reports cumulative
// counters on stdout; they are figures for the report only — the invariants are read from the databases.
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { type OnExhausted, Relay } from '@outbox/producer'
import { openDatabase, readConfig, send, stderrLogger, waitForStart } from './child-support.js'

/** What the orchestrator passes to a relay process. */
export interface RelayProcessConfig {
  readonly name: string
  readonly url: string
  readonly endpoint: string
  readonly signingSecret: string
  readonly leaseMs: number
  readonly requestTimeoutMs: number
  readonly concurrency: number
  readonly batchSize: number
  readonly pollIntervalMs: number
  readonly onExhausted: OnExhausted
  readonly retrySchedule: readonly number[]
  /** Delay repeated after `retrySchedule` this many times: "effectively unlimited" attempts without a huge argv. */
  readonly repeatLastDelay: number
  /** Log every retry and hand-back too (`--trace`). */
  readonly verbose: boolean
}

const config = readConfig<RelayProcessConfig>()
await waitForStart()
const db = openDatabase(config.url, 6)
const last = config.retrySchedule[config.retrySchedule.length - 1] ?? 100
const retrySchedule = [...config.retrySchedule, ...Array<number>(config.repeatLastDelay).fill(last)]
const relay = new Relay({
  db,
  endpoint: config.endpoint,
  secret: config.signingSecret,
  leaseMs: config.leaseMs,
  requestTimeoutMs: config.requestTimeoutMs,
  concurrency: config.concurrency,
  batchSize: config.batchSize,
  pollIntervalMs: config.pollIntervalMs,
  onExhausted: config.onExhausted,
  retrySchedule,
  listen: { connectionString: config.url },
  logger: stderrLogger(config.name, config.verbose),
})

const stats = {
  applied: 0,
  duplicateIgnored: 0,
  staleIgnored: 0,
  retries: 0,
  dead: 0,
  takeovers: 0,
  blocked: 0,
  errors: 0,
}
relay.on('delivery:success', (event) => {
  if (event.deliveryStatus === 'duplicate_ignored') stats.duplicateIgnored += 1
  else if (event.deliveryStatus === 'stale_ignored') stats.staleIgnored += 1
  else stats.applied += 1
})
const retryCauses: Record<string, number> = {}
relay.on('delivery:retry', (event) => {
  stats.retries += 1
  const cause =
    event.httpStatus !== null
      ? `retryHttp${event.httpStatus}`
      : event.error.startsWith('timed out')
        ? 'retryTimeout'
        : 'retryNetwork'
  retryCauses[cause] = (retryCauses[cause] ?? 0) + 1
})
relay.on('delivery:dead', () => {
  stats.dead += 1
})
relay.on('lane:takeover', () => {
  stats.takeovers += 1
})
relay.on('lane:blocked', () => {
  stats.blocked += 1
})
relay.on('relay:error', () => {
  stats.errors += 1
})

// A starved relay fires its request timeouts late and sends late: its event-loop lag tells an overloaded machine
// from a slow subscriber when a run goes wrong.
const lag = monitorEventLoopDelay({ resolution: 20 })
lag.enable()
const report = () => send({ stats: { ...stats, ...retryCauses, loopLagMaxMs: Math.round(lag.max / 1e6) } })
const reporter = setInterval(report, 200)
await relay.start()
send({ ready: true })
process.once('SIGTERM', async () => {
  clearInterval(reporter)
  await relay.stop({ timeoutMs: 2000 })
  report()
  await db.destroy()
  process.exit(0)
})
