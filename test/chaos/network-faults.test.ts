// Database faults in the network, not restarts: a connection that goes silent without a reset. A TCP proxy between
// a relay and PostgreSQL stops forwarding (TcpFaultProxy.blackhole); only deadlines can notice, and these tests
// show each one doing its part — pg's query_timeout with dropTimedOutConnections, the LISTEN heartbeat, and the
// CLI's pool settings on two relays sharing lanes while one of them is cut off.
import {
  checkIntegrity,
  dropTimedOutConnections,
  enqueue,
  type RelayEventMap,
  silentLogger,
  stats,
} from '@outbox/producer'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import {
  listenSettings,
  type PoolDeadlines,
  poolSettings,
  resolvePoolDeadlines,
} from '../../packages/producer/src/cli/pool-settings.js'
// From the source, as the model test does: the test hooks that tell whether a relay holds lanes are not public.
import { Relay, relayTestHooks } from '../../packages/producer/src/relay.js'
import { buildCli, cliEnv, startCli } from '../../packages/producer/test/cli-process.js'
import { TcpFaultProxy } from './tcp-fault-proxy.js'

const t = useTestDatabase()

/** The same deadlines as the environment of a real `outbox relay` process. */
const DEADLINE_ENV = {
  OUTBOX_DB_CONNECT_TIMEOUT_MS: '1000',
  OUTBOX_DB_STATEMENT_TIMEOUT_MS: '1000',
  OUTBOX_DB_QUERY_TIMEOUT_MS: '1500',
  OUTBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '1000',
  OUTBOX_LISTEN_HEARTBEAT_MS: '300',
  OUTBOX_LISTEN_HEARTBEAT_TIMEOUT_MS: '500',
}

/** The CLI's relay deadlines, shortened the way an operator would: through its environment variables. */
const DEADLINES: PoolDeadlines = resolvePoolDeadlines('relay', DEADLINE_ENV)

const cleanups: (() => Promise<unknown>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {})
})

async function startProxy(): Promise<TcpFaultProxy> {
  const proxy = await TcpFaultProxy.forUrl(t.url)
  cleanups.push(() => proxy.close())
  return proxy
}

async function startTestSink(respond?: Parameters<typeof startSink>[0]): Promise<Sink> {
  const sink = await startSink(respond)
  cleanups.push(() => sink.close())
  return sink
}

/** A Kysely instance on a pool set up as the CLI sets up its own (see open-database.ts). */
function cliDatabase(url: string, applicationName: string): Kysely<any> {
  const pool = dropTimedOutConnections(
    new pg.Pool({ connectionString: url, application_name: applicationName, ...poolSettings(DEADLINES) }),
  )
  pool.on('error', () => {})
  pool.on('connect', (client) => client.on('error', () => {}))
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
  cleanups.push(() => db.destroy())
  return db
}

/** Starts a relay and stops it after the test (bounded: a stop must never hang, whatever the network does). */
async function startRelay(relay: Relay): Promise<Relay> {
  cleanups.push(() => relay.stop({ timeoutMs: 500 }))
  await relay.start()
  return relay
}

async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs: number,
): Promise<void> {
  const start = performance.now()
  while (!(await check())) {
    if (performance.now() - start > timeoutMs)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

async function enqueueOne(aggregateId: string, n = 0): Promise<void> {
  await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
    )
}

/** What a relay reported, counted. */
function tally(relay: Relay) {
  const counts = {
    delivered: 0,
    takeovers: 0,
    errors: { claim: 0, flush: 0, outcome: 0, listen: 0, backfill: 0 },
  }
  relay.on('delivery:success', () => {
    counts.delivered += 1
  })
  relay.on('lane:takeover', () => {
    counts.takeovers += 1
  })
  relay.on('relay:error', (event: RelayEventMap['relay:error']) => {
    counts.errors[event.during] += 1
  })
  return counts
}

function delivered(sink: Sink, aggregateId: string): boolean {
  return sink.requests.some((request) => request.json?.aggregate_id === aggregateId)
}

/** True when `work` settles within `ms`: tells a hang (for ever) from slowness, however loaded the machine. */
async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const ceiling = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([work.then(() => true), ceiling])
  } finally {
    clearTimeout(timer)
  }
}

describe('database faults in the network', () => {
  it('a query on a silent connection times out; with dropTimedOutConnections the next query gets a fresh connection, without it the dead one is lent again', async () => {
    const proxy = await startProxy()
    // Kysely, as the relay uses it: it checks a client out, queries, and releases it without an error.
    const open = (drop: boolean) => {
      const pool = new pg.Pool({ connectionString: proxy.url(t.url), max: 1, query_timeout: 500 })
      pool.on('error', () => {})
      pool.on('connect', (client) => client.on('error', () => {}))
      const db = new Kysely<any>({
        dialect: new PostgresDialect({ pool: drop ? dropTimedOutConnections(pool) : pool }),
      })
      cleanups.push(() => db.destroy())
      return db
    }
    const one = (db: Kysely<any>) => sql<{ one: number }>`SELECT 1 AS one`.execute(db)
    const dropping = open(true)
    const keeping = open(false)
    await Promise.all([one(dropping), one(keeping)])

    await proxy.blackhole()
    await expect(one(dropping)).rejects.toThrow('Query read timeout')
    await expect(one(keeping)).rejects.toThrow('Query read timeout')

    await proxy.forward()
    const accepted = proxy.counts().accepted
    expect((await one(dropping)).rows).toEqual([{ one: 1 }])
    expect(proxy.counts().accepted).toBe(accepted + 1)
    // pg kept the silent connection, with the lost query still on it: every query behind it times out too.
    await expect(one(keeping)).rejects.toThrow('Query read timeout')
    expect(proxy.counts().accepted).toBe(accepted + 1)
  })

  it('the LISTEN heartbeat notices a silent LISTEN connection and replaces it; without the heartbeat wake-ups stop without a word', async () => {
    const sink = await startTestSink()
    const proxy = await startProxy()
    // A 10 min poll: an event delivered within any wait below was brought by a NOTIFY, on any machine.
    const relay = await startRelay(
      new Relay({
        db: t.db,
        endpoint: sink.url,
        pollIntervalMs: 600_000,
        listen: listenSettings(proxy.url(t.url), DEADLINES),
        logger: silentLogger,
      }),
    )
    const withHeartbeat = tally(relay)
    expect(relay.listening).toBe(true)
    await enqueueOne('hb-1')
    await waitFor(() => delivered(sink, 'hb-1'), 'a wake-up before the fault', 60_000)

    await proxy.blackhole()
    await waitFor(() => !relay.listening, 'the heartbeat to call the LISTEN connection lost', 60_000)
    expect(withHeartbeat.errors.listen).toBeGreaterThan(0)
    await proxy.forward()
    await waitFor(() => relay.listening, 'the LISTEN connection to be replaced', 60_000)
    await enqueueOne('hb-2')
    await waitFor(() => delivered(sink, 'hb-2'), 'a wake-up on the new LISTEN connection', 60_000)
    expect(await settlesWithin(relay.stop({ timeoutMs: 500 }), 60_000)).toBe(true)

    // The same fault without a heartbeat: the relay still believes it listens, and a NOTIFY never arrives.
    const quiet = await startRelay(
      new Relay({
        db: t.db,
        endpoint: sink.url,
        pollIntervalMs: 600_000,
        listen: { ...listenSettings(proxy.url(t.url), DEADLINES), heartbeatIntervalMs: 0 },
        logger: silentLogger,
      }),
    )
    expect(quiet.listening).toBe(true)
    // Its LISTEN connection works before the fault: an event is brought by a NOTIFY.
    await enqueueOne('hb-q')
    await waitFor(() => delivered(sink, 'hb-q'), 'a wake-up before the fault', 60_000)
    await proxy.blackhole()
    // Three times what the heartbeat above needed at most to notice (300 ms + 500 ms): nothing notices here.
    await new Promise((resolve) => setTimeout(resolve, 2400))
    expect(quiet.listening).toBe(true)
    // By now the relay waits for a NOTIFY or its 10 min poll; the NOTIFY goes into the silent connection.
    await enqueueOne('hb-3')
    await new Promise((resolve) => setTimeout(resolve, 1000))
    expect(delivered(sink, 'hb-3')).toBe(false)
    // And its stop does not hang on a connection whose server never says goodbye (a hang is for ever: a generous
    // ceiling tells it apart on any machine).
    expect(await settlesWithin(quiet.stop({ timeoutMs: 500 }), 60_000)).toBe(true)
  })

  it('two relays, one cut off from PostgreSQL by a silent network: it keeps failing fast, the other takes its lanes over at lease end, it comes back when the network does; nothing lost or reordered', {
    timeout: 120_000,
  }, async () => {
    const proxy = await startProxy()
    const sink = await startTestSink(async () => {
      await new Promise((resolve) => setTimeout(resolve, 10))
      return { status: 200, body: { status: 'applied' } }
    })
    const relayOptions = {
      endpoint: sink.url,
      leaseMs: 2000,
      requestTimeoutMs: 500,
      pollIntervalMs: 100,
      concurrency: 4,
      batchSize: 5,
      retrySchedule: Array.from({ length: 50 }, () => 100),
      logger: silentLogger,
    }
    const cutUrl = proxy.url(t.url)
    const cut = await startRelay(
      new Relay({
        ...relayOptions,
        db: cliDatabase(cutUrl, 'outbox relay (behind the proxy)'),
        listen: listenSettings(cutUrl, DEADLINES),
      }),
    )
    const direct = await startRelay(
      new Relay({
        ...relayOptions,
        db: cliDatabase(t.url, 'outbox relay (direct)'),
        listen: listenSettings(t.url, DEADLINES),
      }),
    )
    const cutCounts = tally(cut)
    const directCounts = tally(direct)

    // A steady stream over 12 aggregates, written straight to PostgreSQL, through every phase.
    let writing = true
    let written = 0
    const writer = (async () => {
      while (writing) {
        await enqueueOne(`agg-${written % 12}`, written)
        written += 1
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    })()
    cleanups.push(async () => {
      writing = false
      await writer
    })

    await waitFor(() => cutCounts.delivered >= 20, 'the relay behind the proxy to deliver', 60_000)
    await waitFor(
      () => relayTestHooks(cut).activity().activeLanes > 0,
      'the relay behind the proxy to hold lanes',
      60_000,
    )
    await proxy.blackhole()
    const cutAt = performance.now()
    const errorsAtCut = cutCounts.errors.claim + cutCounts.errors.flush
    const directAtCut = directCounts.delivered

    // The cut relay does not hang: its statements time out (1.5 s), it reports them and tries again.
    await waitFor(
      () => cutCounts.errors.claim + cutCounts.errors.flush >= errorsAtCut + 3,
      'the cut-off relay to report failing statements',
      60_000,
    )
    await waitFor(() => !cut.listening, 'the cut-off relay to notice its LISTEN connection is gone', 60_000)
    // The direct relay takes over the lanes the cut one holds once their leases (2 s) end, and keeps delivering.
    await waitFor(() => directCounts.takeovers > 0, 'a takeover at lease end', 60_000)
    expect(performance.now() - cutAt).toBeGreaterThanOrEqual(relayOptions.leaseMs - 100)
    await waitFor(() => directCounts.delivered >= directAtCut + 20, 'delivery to go on', 60_000)
    const cutErrors = cutCounts.errors.claim + cutCounts.errors.flush
    await waitFor(
      () => cutCounts.errors.claim + cutCounts.errors.flush > cutErrors,
      'the cut-off relay to keep trying',
      60_000,
    )
    expect(cut.running).toBe(true)

    // The network is back: new connections pass (the silenced ones stay dead), and the relay delivers again.
    await proxy.forward()
    const cutBefore = cutCounts.delivered
    await waitFor(
      () => cutCounts.delivered >= cutBefore + 10,
      'the relay behind the proxy to deliver again',
      60_000,
    )
    await waitFor(() => cut.listening, 'its LISTEN connection to come back', 60_000)

    // A stop while cut off again completes within a bound: nothing waits on a server that never answers.
    writing = false
    await writer
    await proxy.blackhole()
    // (a hang is for ever: a generous ceiling tells it apart on any machine).
    const stopping = performance.now()
    expect(await settlesWithin(cut.stop({ timeoutMs: 1000 }), 60_000)).toBe(true)
    const stopMs = performance.now() - stopping

    // What the cut relay left behind is taken over once its leases end: everything is delivered.
    await waitFor(async () => (await stats(t.db)).pending === 0, 'every event to be delivered', 60_000)
    await direct.stop({ timeoutMs: 1000 })

    const rows = await t.db
      .selectFrom('outbox')
      .select(['event_id', 'status'])
      .where('aggregate_id', 'like', 'agg-%')
      .execute()
    expect(rows.length).toBe(written)
    expect(rows.filter((row) => row.status !== 'sent')).toEqual([])
    const seen = new Set(sink.requests.map((request) => request.json.event_id))
    expect(rows.filter((row) => !seen.has(row.event_id))).toEqual([])
    // Per aggregate, no event went out before the one below it had (duplicates — a lost mark — are allowed).
    const highest = new Map<string, number>()
    const outOfOrder: string[] = []
    for (const request of sink.requests) {
      const { aggregate_id: id, sequence } = request.json
      if (sequence > (highest.get(id) ?? 0) + 1) outOfOrder.push(`${id}#${sequence}`)
      highest.set(id, Math.max(highest.get(id) ?? 0, sequence))
    }
    expect(outOfOrder).toEqual([])
    const integrity = await checkIntegrity(t.db, { maxLeaseMs: relayOptions.leaseMs })
    expect(integrity.violations).toEqual([])
    expect(integrity.ok).toBe(true)
    console.log(
      `network faults: ${written} events, ${sink.requests.length} requests; cut relay ${cutCounts.delivered} delivered, ` +
        `${cutCounts.errors.claim} claim + ${cutCounts.errors.flush} flush + ${cutCounts.errors.listen} listen errors, ` +
        `stop while cut off ${Math.round(stopMs)} ms; direct relay ${directCounts.delivered} delivered, ` +
        `${directCounts.takeovers} takeovers; proxy ${JSON.stringify(proxy.counts())}`,
    )
  })

  it('outbox relay, the real process, behind a silent network: it logs its failing statements, delivers again when the network is back, and exits promptly on SIGTERM while cut off', async ({
    onTestFinished,
  }) => {
    buildCli()
    const proxy = await startProxy()
    const sink = await startTestSink()
    const relay = startCli(
      [
        'relay',
        '--endpoint',
        sink.url,
        '--listen',
        '--lease',
        '2s',
        '--request-timeout',
        '500ms',
        '--poll-interval',
        '100ms',
        '--retry-schedule',
        '100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms',
        '--stop-timeout',
        '500ms',
        '--log-format',
        'json',
      ],
      cliEnv({ DATABASE_URL: proxy.url(t.url), ...DEADLINE_ENV }),
      { onTestFinished },
    )
    await relay.waitFor(() => relay.stdout().includes('"msg":"relay started"'), 'relay started')
    await enqueueOne('cli-1')
    await waitFor(() => delivered(sink, 'cli-1'), 'a delivery before the fault', 60_000)

    await proxy.blackhole()
    const failures = () => relay.lines().filter((line) => line.includes('"event":"relay:error"'))
    await relay.waitFor(() => failures().length >= 2, 'the relay to log failing statements', 60_000)
    expect(failures().some((line) => /"during":"(claim|flush)"/.test(line))).toBe(true)
    await enqueueOne('cli-2')

    await proxy.forward()
    await waitFor(() => delivered(sink, 'cli-2'), 'the relay to deliver again', 60_000)

    await proxy.blackhole()
    // Exits by itself within a generous ceiling (it rejects past it): a hang on the silent network is for ever.
    const result = await relay.stop('SIGTERM', 60_000)
    expect(result.code).toBe(0)
    expect(result.stderr).toBe('')
  })
})
