/**
 * `pnpm demo`: the orders example end to end, against two subscribers that fail on purpose — one of them
 * badly, and slowly — with the guarantee checked at the end for each.
 *
 * It starts PostgreSQL (embedded, or scratch databases on DATABASE_URL), the orders service, two subscribers
 * (`billing` and `analytics`, the same app on a database each) with a stored subscription each, and relays
 * serving both subscriptions — the same code as orders-service.ts, subscriber.ts and relay.ts run alone — then
 * places orders many at a time and walks each through its status changes. The subscribers answer some webhooks
 * with 500 and cut off the answer to others after committing, so retries and duplicates really happen;
 * `analytics` fails far more often and answers late. Retry schedules in milliseconds keep the run to seconds.
 * When every event is delivered it compares the orders database with each subscriber's and prints a summary.
 * Exit 0 only if neither subscriber lost an event or applied one out of order. Everything started
 * here is stopped in every case: success, failure and Ctrl-C. `pnpm demo --help` lists the options.
 */
import { type Logger as ConsumerLogger, createPool } from '@outbox/consumer'
import {
  createSubscription,
  disableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  type Relay,
  type Logger as RelayLogger,
  stats,
} from '@outbox/producer'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import { connect } from './database.js'
import { openDemoDatabases } from './demo/demo-databases.js'
import { type FaultCounts, injectFaults } from './demo/faults.js'
import { type DemoFlags, parseDemoFlags, USAGE, UsageError } from './demo/flags.js'
import { type PlaceOrdersProgress, placeOrders } from './demo/place-orders.js'
import { ProgressLine } from './demo/progress-line.js'
import { seededRandom } from './demo/random.js'
import { RETRY_SCHEDULE_MS, type SubscriberProfile, subscriberProfiles } from './demo/subscriber-profiles.js'
import { type DeliveryCounts, failures, formatSummary, type Summary, summarize } from './demo/summary.js'
import { createOrdersApp, migrateOrders, type OrdersDatabase } from './orders-service.js'
import { createRelay } from './relay.js'
import { serve } from './serve.js'
import { signalExitCode } from './shutdown.js'
import { createSubscriberApp, migrateSubscriber, type SubscriberDatabase } from './subscriber.js'

/** Orders each relay delivers at once: with a thousand orders in flight, more lanes mean less waiting. */
const RELAY_CONCURRENCY = 64
/**
 * Connections of each subscriber's pool: each webhook holds one for its transaction. Two subscribers at 16 keep
 * the run at about 75 connections in all (orders 20, relays 2 × 10 + LISTEN, subscribers), well below
 * PostgreSQL's default `max_connections` of 100 on a server the demo may share (DATABASE_URL).
 */
const SUBSCRIBER_POOL = 16
/** How often an idle relay looks for due retries (NOTIFY wakes it for new events). */
const POLL_INTERVAL_MS = 50
/** Orders the simulated clients have in progress at once. */
const ORDERS_IN_FLIGHT = 50
/** Longest wait for any one cleanup step; the next step runs regardless. */
const CLEANUP_STEP_TIMEOUT_MS = 15_000
/** Warnings and errors printed during a run before the rest are only counted. */
const MAX_NOTES = 20

/** Wall-clock milliseconds with sub-millisecond precision, comparable with PostgreSQL's clock_timestamp(). */
const wallClockMs = () => performance.timeOrigin + performance.now()
const count = (value: number) => value.toLocaleString('en-US')

/** Undo steps, run newest first, each bounded in time, whatever the others do. */
class Cleanup {
  readonly #steps: { name: string; run: () => Promise<unknown> }[] = []
  /**
   * True once cleanup began. Closing a pool sends each connection's goodbye without waiting for the server to
   * act on it, so a server stopped right after may still cut those connections: expected then, worth a word
   * before.
   */
  started = false

  add(name: string, run: () => Promise<unknown>): void {
    this.#steps.push({ name, run })
  }

  async run(report: (message: string) => void): Promise<void> {
    this.started = true
    for (const step of this.#steps.splice(0).reverse()) {
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`gave up after ${CLEANUP_STEP_TIMEOUT_MS} ms`)),
          CLEANUP_STEP_TIMEOUT_MS,
        )
      })
      const started = performance.now()
      try {
        await Promise.race([step.run(), timeout])
        const seconds = (performance.now() - started) / 1000
        if (seconds > 3) report(`cleanup: stopping the ${step.name} took ${seconds.toFixed(1)} s`)
      } catch (error) {
        report(
          `cleanup: stopping the ${step.name} failed: ${error instanceof Error ? error.message : String(error)}`,
        )
      } finally {
        clearTimeout(timer)
      }
    }
  }
}

/** Settles when the signal aborts (never rejects the caller's flow on its own). */
function whenAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve()
    else signal.addEventListener('abort', () => resolve(), { once: true })
  })
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
  })
}

function describeFields(fields: Record<string, unknown> | undefined): string {
  if (!fields) return ''
  const parts = Object.entries(fields)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => {
      // Errors arrive as Error objects or as the consumer's { name, message, stack } records: the message
      // will do.
      const message = (value as { message?: unknown } | null)?.message
      const text =
        typeof message === 'string'
          ? message
          : typeof value === 'object'
            ? JSON.stringify(value)
            : String(value)
      return `${key}=${text}`
    })
  return parts.length > 0 ? ` (${parts.join(', ')})` : ''
}

/** One subscriber of a run: its service, database, subscription and what happened to it. */
interface RunningSubscriber {
  readonly profile: SubscriberProfile
  readonly db: Kysely<SubscriberDatabase>
  readonly subscriptionId: string
  readonly url: string
  readonly faults: FaultCounts
  readonly deliveries: DeliveryCounts
  /** Rows of its timeline, sampled for the progress line. */
  applied: number
}

/** Runs the demo; resolves with the summary, or undefined when interrupted. */
async function runDemo(
  flags: DemoFlags,
  signal: AbortSignal,
  cleanup: Cleanup,
  progress: ProgressLine,
  note: (message: string) => void,
): Promise<Summary | undefined> {
  const random = seededRandom(flags.seed)
  const profiles = subscriberProfiles(flags)
  const eventsPerOrder = 1 + flags.updates
  const retries = (schedule: readonly number[]) =>
    `retried after ${schedule[0]} ms … ${schedule.at(-1)} ms (${schedule.length + 1} attempts), then dead-lettered`
  console.log(
    `outbox demo: ${count(flags.orders)} orders × ${eventsPerOrder} events (order.created + ${flags.updates} order.updated) = ${count(flags.orders * eventsPerOrder)} events, each delivered to ${profiles.length} subscribers · seed ${flags.seed}`,
  )
  for (const profile of profiles) {
    console.log(`  ${profile.name} ${profile.behaviour}; ${retries(profile.retrySchedule)}`)
  }
  console.log(
    `  ${flags.relays} relay${flags.relays === 1 ? '' : 's'} with LISTEN, serving both subscriptions`,
  )

  const databases = await openDemoDatabases(profiles.map((profile) => profile.name))
  cleanup.add('PostgreSQL', () => databases.close())
  console.log(`${databases.description}: one database for each service`)
  if (signal.aborted) return undefined

  const onPoolError = (error: Error) => {
    if (!signal.aborted && !cleanup.started) note(`database connection lost: ${error.message}`)
  }
  const ordersDb = connect<OrdersDatabase>(databases.ordersUrl, { max: 20, onError: onPoolError })
  cleanup.add('orders database pool', () => ordersDb.destroy())
  await migrateOrders(ordersDb)
  // Events go to the stored subscriptions only: with the implicit one enabled, each event would also wait for
  // a relay with an `endpoint`, which this run does not start.
  await disableSubscription(ordersDb, IMPLICIT_SUBSCRIPTION_ID, {
    reason: 'the demo serves stored subscriptions',
  })

  const subscribers: RunningSubscriber[] = []
  for (const [index, profile] of profiles.entries()) {
    // createPool, as subscriber.ts: the guarded pool createConsumer recognises (a plain one draws its warning).
    const pool = createPool(
      { connectionString: databases.subscriberUrls.get(profile.name)!, max: SUBSCRIBER_POOL },
      {
        debug: () => {},
        info: () => {},
        warn: (_fields, message) => note(`${profile.name}: ${message}`),
        error: (_fields, message) => note(`${profile.name}: ${message}`),
      },
    )
    const db = new Kysely<SubscriberDatabase>({ dialect: new PostgresDialect({ pool }) })
    cleanup.add(`${profile.name} database pool`, () => db.destroy())
    await migrateSubscriber(db)
    // Listening first, on any free port, gives the URL the subscription needs; the subscription gives the secret
    // the service needs. Express takes routes added after listen, and no event reaches it before the relays
    // start.
    const app = express()
    const server = await serve(app, 0)
    cleanup.add(profile.name, () => server.close(2_000))
    const url = `${server.url}/hooks`
    // A secret of its own, generated and returned once; requests signed otherwise are refused with 401.
    const { id, secret } = await createSubscription(ordersDb, {
      url,
      name: profile.name,
      retrySchedule: profile.retrySchedule,
    })
    const consumerLogger: ConsumerLogger = {
      debug: () => {},
      info: () => {},
      warn: (fields, message) => note(`${profile.name}: ${message}${describeFields(fields)}`),
      error: (fields, message) => note(`${profile.name}: ${message}${describeFields(fields)}`),
    }
    const faults: FaultCounts = { requests: 0, failed: 0, dropped: 0 }
    app.post(
      '/hooks',
      injectFaults({
        failureRate: profile.failureRate,
        dropRate: profile.dropRate,
        delayMs: profile.delayMs,
        // A sequence of its own per subscriber, so one's choices do not shift with the other's traffic.
        random: seededRandom(flags.seed + index + 1),
        counts: faults,
      }),
    )
    app.use(createSubscriberApp({ db, secret, logger: consumerLogger }))
    subscribers.push({
      profile,
      db,
      subscriptionId: id,
      url,
      faults,
      deliveries: { attempts: 0, duplicates: 0, stale: 0, dead: 0 },
      applied: 0,
    })
  }
  const bySubscription = new Map(subscribers.map((subscriber) => [subscriber.subscriptionId, subscriber]))

  const commits = new Map<string, number>()
  const orders = await serve(
    createOrdersApp({
      db: ordersDb,
      onCommitted: (event) => commits.set(event.eventId, wallClockMs()),
      onError: (error) => note(`orders service: ${error instanceof Error ? error.message : String(error)}`),
    }),
    0,
  )
  cleanup.add('orders service', () => orders.close(2_000))
  console.log(
    `orders service ${orders.url} · ${subscribers.map((s) => `${s.profile.name} ${s.url}`).join(' · ')}`,
  )

  const relayLogger: RelayLogger = {
    debug: () => {},
    info: () => {},
    warn: (fields, message) => note(`relay: ${message}${describeFields(fields)}`),
    error: (fields, message) => {
      if (!signal.aborted) note(`relay: ${message}${describeFields(fields)}`)
    },
  }
  const deliveriesOf = (subscriptionId: string) => bySubscription.get(subscriptionId)?.deliveries
  const relays: Relay[] = []
  const relayDbs: Kysely<OrdersDatabase>[] = []
  cleanup.add('relay database pools', () => Promise.all(relayDbs.map((db) => db.destroy())))
  // One step for all relays, stopped side by side: each lets its in-flight webhooks finish, writes its marks
  // and hands its lanes back.
  cleanup.add('relays', () => Promise.all(relays.map((relay) => relay.stop({ timeoutMs: 2_000 }))))
  for (let index = 1; index <= flags.relays; index++) {
    // Each relay on its own pool, as separate processes would be.
    const relayDb = connect<OrdersDatabase>(databases.ordersUrl, { max: 10, onError: onPoolError })
    relayDbs.push(relayDb)
    const relay = createRelay({
      db: relayDb,
      databaseUrl: databases.ordersUrl,
      // No endpoint: every enabled stored subscription, each with its own URL, secret and retry schedule,
      // sharing the relay's lanes evenly. Their URLs are on 127.0.0.1, which a relay refuses unless allowed.
      allowPrivateNetworks: true,
      retrySchedule: RETRY_SCHEDULE_MS,
      // No breaker: the subscribers fail on purpose, every few milliseconds, and the run checks each event's own
      // attempts and dead letters; a breaker would pace them by its cool-down (seconds) instead.
      endpointBreaker: false,
      concurrency: RELAY_CONCURRENCY,
      // A retry is due milliseconds after a failure; look for due work as often, not every 200 ms.
      pollIntervalMs: POLL_INTERVAL_MS,
      logger: relayLogger,
    })
    relay.on('delivery:success', (delivered) => {
      const deliveries = deliveriesOf(delivered.subscriptionId)
      if (!deliveries) return
      deliveries.attempts += 1
      if (delivered.deliveryStatus === 'duplicate_ignored') deliveries.duplicates += 1
    })
    relay.on('delivery:retry', (retried) => {
      const deliveries = deliveriesOf(retried.subscriptionId)
      if (deliveries) deliveries.attempts += 1
    })
    relay.on('delivery:dead', (dead) => {
      const deliveries = deliveriesOf(dead.subscriptionId)
      if (!deliveries) return
      deliveries.attempts += 1
      deliveries.dead += 1
    })
    relay.on('delivery:stale', (stale) => {
      const deliveries = deliveriesOf(stale.subscriptionId)
      if (deliveries) deliveries.stale += 1
    })
    relay.on('subscription:skipped', (skipped) => {
      note(`relay: subscription ${skipped.name} skipped: ${skipped.reason}`)
    })
    relays.push(relay)
    await relay.start()
  }
  if (signal.aborted) return undefined

  const load: PlaceOrdersProgress = { ordersPlaced: 0, statusChanges: 0, errors: 0, errorSamples: [] }
  let sampling = false
  const sampler = setInterval(() => {
    if (sampling) return
    sampling = true
    Promise.all(
      subscribers.map((subscriber) =>
        subscriber.db
          .selectFrom('order_timeline')
          .select((eb) => eb.fn.countAll<string>().as('applied'))
          .executeTakeFirst()
          .then((row) => {
            subscriber.applied = Number(row?.applied ?? subscriber.applied)
          })
          .catch(() => {}),
      ),
    ).finally(() => {
      sampling = false
    })
  }, 200)
  cleanup.add('progress sampler', async () => clearInterval(sampler))

  const started = performance.now()
  let phase = 'placing orders'
  const percent = (rate: number) => `${Math.round(rate * 100)}%`
  progress.start(() =>
    [
      `${((performance.now() - started) / 1000).toFixed(1).padStart(5)} s  ${phase}`,
      `orders ${count(load.ordersPlaced)}/${count(flags.orders)}`,
      `${count(commits.size)} events committed`,
      ...subscribers.map(({ profile, applied, deliveries, faults }) => {
        const misbehaving = profile.delayMs ? ` (slow, failing ${percent(profile.failureRate)})` : ''
        return `${profile.name}${misbehaving} ${count(applied)} applied, ${count(deliveries.attempts)} attempts (${count(faults.failed)} failed, ${count(faults.dropped)} dropped), ${count(deliveries.dead)} dead`
      }),
    ].join(' · '),
  )

  await placeOrders(
    {
      ordersUrl: orders.url,
      orders: flags.orders,
      updates: flags.updates,
      concurrency: ORDERS_IN_FLIGHT,
      random,
      signal,
    },
    load,
  )
  for (const sample of load.errorSamples) note(`orders service: ${sample}`)

  // Every event is committed now; wait until none is pending for any subscription (each one sent or
  // dead-lettered). A slow machine only takes longer; the run gives up when deliveries stall: nothing sent or
  // dead-lettered for --timeout.
  phase = 'delivering'
  let stalled = false
  let lastPending = Number.POSITIVE_INFINITY
  let lastProgress = performance.now()
  while (!signal.aborted) {
    const { pending } = await stats(ordersDb)
    if (pending === 0) break
    if (pending < lastPending) {
      lastPending = pending
      lastProgress = performance.now()
    } else if (performance.now() - lastProgress > flags.timeoutSeconds * 1000) {
      stalled = true
      break
    }
    await sleep(100, signal)
  }
  const seconds = (performance.now() - started) / 1000
  phase = 'done'
  progress.stop()
  if (signal.aborted) return undefined
  if (stalled) note(`gave up: no event was delivered for ${flags.timeoutSeconds} s (--timeout)`)

  return await summarize({
    ordersDb,
    subscribers: subscribers.map((subscriber) => ({
      name: subscriber.profile.name,
      subscriptionId: subscriber.subscriptionId,
      db: subscriber.db,
      deliveries: subscriber.deliveries,
      faults: subscriber.faults,
    })),
    commits,
    clientErrors: load.errors,
    seconds,
  })
}

async function main(): Promise<void> {
  let flags: DemoFlags | 'help'
  try {
    flags = parseDemoFlags(process.argv.slice(2))
  } catch (error) {
    if (!(error instanceof UsageError)) throw error
    console.error(`demo: ${error.message}\nRun pnpm demo --help for the options.`)
    process.exitCode = 2
    return
  }
  if (flags === 'help') {
    console.log(USAGE)
    return
  }

  // The first signal stops the run and cleans up; the demo never exits before its cleanup is done. (One
  // Ctrl-C can arrive twice: from the terminal and relayed by pnpm or tsx.)
  const interrupt = new AbortController()
  let interruptedBy: NodeJS.Signals | undefined
  const onSignal = (signal: NodeJS.Signals) => {
    if (interruptedBy) return
    interruptedBy = signal
    interrupt.abort()
  }
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, onSignal)

  const progress = new ProgressLine(process.stdout)
  // Warnings wait a moment before they are printed. Once interrupted, the database may be gone under running
  // requests, and a Ctrl-C reaches the embedded server as well, which may drop connections a little before
  // the demo hears of the signal: those failures are expected, not worth a word.
  const pendingNotes: string[] = []
  let notes = 0
  const printNotes = () => {
    for (const message of pendingNotes.splice(0)) {
      if (interrupt.signal.aborted) return
      notes += 1
      if (notes <= MAX_NOTES) progress.log(`  ! ${message}`)
      else if (notes === MAX_NOTES + 1) progress.log('  ! … more warnings follow; only the first are shown')
    }
  }
  const notePrinter = setInterval(printNotes, 300)
  const note = (message: string) => {
    if (!interrupt.signal.aborted) pendingNotes.push(message)
  }

  const cleanup = new Cleanup()
  let summary: Summary | undefined
  try {
    const run = runDemo(flags, interrupt.signal, cleanup, progress, note)
    // An interrupt goes straight to cleanup, even if the run is stuck on a server that went away.
    await Promise.race([run.then((result) => (summary = result)), whenAborted(interrupt.signal)])
    run.catch(() => {}) // once interrupted, whatever the run still throws is moot
  } catch (error) {
    if (!interrupt.signal.aborted) {
      progress.stop()
      console.error('demo failed:', error)
      process.exitCode = 1
    }
  } finally {
    printNotes()
    progress.stop()
    if (interruptedBy) console.log(`\n${interruptedBy}: stopping everything the demo started…`)
    await cleanup.run((message) => console.error(message))
    clearInterval(notePrinter)
    printNotes()
  }

  if (interruptedBy) {
    console.log('Interrupted; everything is stopped.')
    process.exitCode = signalExitCode(interruptedBy)
  } else if (summary) {
    console.log('\nSummary')
    console.log(formatSummary(summary))
    const reasons = failures(summary)
    if (reasons.length === 0) {
      const { eventsCreated, subscribers } = summary
      const names = subscribers.map((subscriber) => subscriber.name).join(' and ')
      const extra = subscribers
        .map((subscriber) => `${count(subscriber.attempts - eventsCreated)} to ${subscriber.name}`)
        .join(', ')
      console.log(
        `\nPASS: lost 0, out of order 0 for ${names} — every committed event was applied exactly once and in order by each, through extra deliveries (failures and duplicates): ${extra}.`,
      )
      process.exitCode = 0
    } else {
      console.log(`\nFAIL: ${reasons.join('; ')}.`)
      process.exitCode = 1
    }
  }
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(signal, onSignal)
  // Everything is closed, so the process ends by itself. If a forgotten handle kept it alive, say so and exit
  // anyway rather than hang a terminal or a CI job.
  setTimeout(() => {
    console.error('demo: something still holds the process open after cleanup; exiting')
    process.exit()
  }, 5_000).unref()
}

await main()
