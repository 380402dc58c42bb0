import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  createSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  getSubscription,
  type Logger,
  listAudit,
  OutboxError,
  prune,
  stats,
} from '../src/index.js'
import { buildCli, cliEnv, runCli } from './cli-process.js'
import { useStoredSubscriptions } from './stored-subscriptions.js'
import { expectLanesLive, sleep, waitFor, waitForLockWaiters } from './support.js'

const t = useTestDatabase()

/** The audit log's entries of drops (subscription changes are audited too, and are not what these tests count). */
async function dropsAudited() {
  return (await listAudit(t.db)).filter((entry) => entry.action === 'subscription.drop-pending')
}
const stored = useStoredSubscriptions(t, {}, () =>
  sql`TRUNCATE outbox, outbox_counter, outbox_lane, outbox_audit`.execute(t.db),
)

/** A logger that keeps the warnings prune writes. */
function captureLogger(): Logger & {
  readonly warnings: { fields: Record<string, unknown>; message: string }[]
} {
  const warnings: { fields: Record<string, unknown>; message: string }[] = []
  const noop = () => {}
  return {
    warnings,
    debug: noop,
    info: noop,
    warn: (fields, message) => void warnings.push({ fields, message }),
    error: noop,
  }
}

/** Enqueues `count` events for one aggregate, each in its own transaction. */
async function publish(aggregateId: string, count: number): Promise<void> {
  for (let n = 0; n < count; n++) {
    await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
      )
  }
}

/** A stored subscription (on an address nothing listens on unless `url` is given), by name. */
async function subscribe(name: string, url = `http://127.0.0.1:9/${name}`): Promise<string> {
  return (await createSubscription(t.db, { url, name })).id
}

/** Moves a subscription's disabling `days` into the past, as if it had been disabled that long ago. */
async function disabledDaysAgo(id: string, days: number): Promise<void> {
  await sql`UPDATE outbox_subscription SET disabled_at = now() - ${days} * interval '1 day' WHERE id = ${id}::uuid`.execute(
    t.db,
  )
}

/** Moves the enqueue time of some of a subscription's rows `days` into the past (all of a lane's when no sequences). */
async function enqueuedDaysAgo(
  id: string,
  aggregateId: string,
  days: number,
  sequences?: number[],
): Promise<void> {
  await sql`UPDATE outbox SET created_at = now() - ${days} * interval '1 day'
    WHERE subscription_id = ${id}::uuid AND aggregate_id = ${aggregateId}
      AND (${sequences === undefined} OR sequence = ANY (${sequences ?? []}::bigint[]))`.execute(t.db)
}

/** One subscription's rows of one aggregate: [sequence, status] in sequence order. */
async function rowsOf(id: string, aggregateId: string): Promise<[number, string][]> {
  const { rows } = await sql<{ sequence: string; status: string }>`
    SELECT sequence, status FROM outbox WHERE subscription_id = ${id}::uuid AND aggregate_id = ${aggregateId}
    ORDER BY sequence`.execute(t.db)
  return rows.map((row) => [Number(row.sequence), row.status])
}

async function laneOf(id: string, aggregateId: string) {
  return await t.db
    .selectFrom('outbox_lane')
    .selectAll()
    .where('subscription_id', '=', id)
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirstOrThrow()
}

describe('prune({ disabledRetention })', () => {
  it('drops what a subscription held disabled past the retention, and nothing held while enabled or not yet past it', async () => {
    const gone = await subscribe('gone')
    const enabled = await subscribe('enabled')
    const recentlyDisabled = await subscribe('recently-disabled')
    const youngRows = await subscribe('young-rows')
    await publish('a', 3)
    await publish('b', 2)
    for (const id of [gone, recentlyDisabled, youngRows]) await disableSubscription(t.db, id)
    // gone: disabled 8 days, rows 8 days old. enabled: rows 8 days old, never disabled. recently-disabled: rows 8
    // days old, disabled a day ago. young-rows: disabled 8 days ago, its rows enqueued a day ago (while disabled).
    for (const id of [gone, enabled, recentlyDisabled]) {
      await enqueuedDaysAgo(id, 'a', 8)
      await enqueuedDaysAgo(id, 'b', 8)
    }
    await disabledDaysAgo(gone, 8)
    await disabledDaysAgo(recentlyDisabled, 1)
    await disabledDaysAgo(youngRows, 8)
    await enqueuedDaysAgo(youngRows, 'a', 1)
    await enqueuedDaysAgo(youngRows, 'b', 1)

    // Turned off, nothing is dropped.
    const off = await prune(t.db, { retention: '30d', disabledRetention: false, logger: captureLogger() })
    expect(off).toEqual({ removed: 0, dropped: 0, caughtUp: true })

    const logger = captureLogger()
    const batches: { status: string; removed: number }[] = []
    const result = await prune(t.db, {
      retention: '30d',
      disabledRetention: '7d',
      actor: 'nightly-prune',
      logger,
      onBatch: (batch) => batches.push(batch),
    })
    expect(result).toEqual({ removed: 0, dropped: 5, caughtUp: true })
    expect(batches).toEqual([
      { status: 'sent', removed: 0 },
      { status: 'disabled', removed: 5 },
    ])
    expect(await rowsOf(gone, 'a')).toEqual([])
    expect(await rowsOf(gone, 'b')).toEqual([])
    for (const id of [enabled, recentlyDisabled, youngRows]) {
      expect(await rowsOf(id, 'a')).toHaveLength(3)
      expect(await rowsOf(id, 'b')).toHaveLength(2)
    }
    await expectLanesLive(t.db)

    // Counted on the subscription, in stats, and logged once for it.
    const subscription = await getSubscription(t.db, gone)
    expect(subscription?.dropped).toBe(5)
    expect(subscription?.lastDroppedAt).toBeInstanceOf(Date)
    expect((await getSubscription(t.db, enabled))?.dropped).toBe(0)
    const snapshot = await stats(t.db, { disabledRetention: '7d' })
    expect(snapshot.subscriptions.find((sub) => sub.id === gone)).toMatchObject({ pending: 0, dropped: 5 })
    // Audited: who asked, which subscription, how many, in the batch's own transaction (one batch here).
    expect(await dropsAudited()).toEqual([
      expect.objectContaining({
        actor: 'nightly-prune',
        action: 'subscription.drop-pending',
        target: { subscriptionId: gone, subscriptionName: 'gone', disabledRetentionMs: 7 * 86_400_000 },
        result: { dropped: 5, lanes: 2, skippedLanes: 0 },
      }),
    ])
    expect(logger.warnings).toEqual([
      {
        fields: expect.objectContaining({ subscriptionId: gone, subscriptionName: 'gone', dropped: 5 }),
        message: expect.stringMatching(/^dropped 5 pending deliveries of disabled subscription gone/),
      },
    ])
    // The lost deliveries stay said while the subscription stays disabled; the one that holds events says when
    // the first of them goes (its rows are a day old, it was disabled 8 days ago: in 6 days).
    expect(snapshot.warnings).toContainEqual(
      expect.stringMatching(/disabled subscription gone .*lost 5 pending/),
    )
    const held = snapshot.warnings.find((warning) => warning.includes('young-rows'))
    const from = /the first from (\S+)/.exec(held ?? '')?.[1]
    expect(held).toMatch(/holds 5 pending events; .*longer than 7d/)
    expect(Math.abs(Date.parse(from!) - (Date.now() + 6 * 86_400_000))).toBeLessThan(60_000)
    const report = await checkIntegrity(t.db, { disabledRetention: '7d' })
    expect(report.warnings).toEqual(snapshot.warnings)
    // By default prune keeps them: no date to give.
    expect((await checkIntegrity(t.db)).warnings).toContainEqual(
      'disabled subscription young-rows holds 5 pending events; they pin pruning: enable or delete it',
    )

    // A second run finds nothing more; the counter does not move.
    expect(await prune(t.db, { retention: '30d', disabledRetention: '7d', logger })).toEqual({
      removed: 0,
      dropped: 0,
      caughtUp: true,
    })
    expect((await getSubscription(t.db, gone))?.dropped).toBe(5)
    expect(await dropsAudited()).toHaveLength(1)
  })

  it('keeps everything by default: a prune with only a retention drops nothing a disabled subscription holds, even one a single 410 disabled', async () => {
    const sink = await stored.sink(() => ({ status: 410 }))
    const gone = await subscribe('answered-410', sink.url)
    const paused = await subscribe('paused-by-hand')
    await publish('g', 3)
    await disableSubscription(t.db, paused)
    // The relay meets the 410 and disables the subscription itself, with reason 'gone'.
    await stored.relay().runOnce()
    expect(await getSubscription(t.db, gone)).toMatchObject({ state: 'disabled', disabledReason: 'gone' })
    for (const id of [gone, paused]) {
      await disabledDaysAgo(id, 30)
      await enqueuedDaysAgo(id, 'g', 30)
    }

    const logger = captureLogger()
    // The README's own cron line.
    expect(await prune(t.db, { retention: '7d', logger })).toEqual({ removed: 0, dropped: 0, caughtUp: true })
    expect(await prune(t.db, { retention: '7d', disabledRetention: false, logger })).toEqual({
      removed: 0,
      dropped: 0,
      caughtUp: true,
    })
    for (const id of [gone, paused]) {
      expect((await rowsOf(id, 'g')).map(([, status]) => status)).toEqual(['pending', 'pending', 'pending'])
      expect((await getSubscription(t.db, id))?.dropped).toBe(0)
    }
    expect(logger.warnings).toEqual([])
    expect(await dropsAudited()).toEqual([])
    // What stats says of it by default: kept, with no date it goes from.
    const warning = (await stats(t.db)).warnings.find((text) => text.includes('answered-410'))
    expect(warning).toBe(
      'disabled subscription answered-410 holds 3 pending events; they pin pruning: enable or delete it',
    )
    await expectLanesLive(t.db)
  })

  it('drops a prefix of each lane (created_at need not grow with the sequence), and enabling delivers the tail in order', async () => {
    const sink = await stored.sink()
    const id = await subscribe('paused', sink.url)
    await publish('p', 6)
    await publish('q', 3)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 9)
    // p: 1, 2 and 4 enqueued 10 days ago, 3 a day ago (a transaction that started later committed first), 5 and 6
    // now. Its head had failed twice and waits in backoff; the rows behind it wait with it.
    await enqueuedDaysAgo(id, 'p', 10, [1, 2, 4])
    await enqueuedDaysAgo(id, 'p', 1, [3])
    await sql`UPDATE outbox SET available_at = now() + interval '2 hours'
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'p'`.execute(t.db)
    await sql`UPDATE outbox SET attempts = 2, last_status = 500
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'p' AND sequence = 1`.execute(t.db)
    // q: parked by a 409 on its head (1, old) under an expired claim whose request had started; 2 and 3 are new.
    await enqueuedDaysAgo(id, 'q', 10, [1])
    await sql`UPDATE outbox SET last_status = 409, available_at = now() + interval '5 minutes'
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'q'`.execute(t.db)
    await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now(), conflict_count = 3,
        claim_token = gen_random_uuid(), leased_until = now() - interval '1 minute', watch_starts = true
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'q'`.execute(t.db)
    await sql`UPDATE outbox_lane SET started_token = claim_token
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'q'`.execute(t.db)
    await expectLanesLive(t.db)

    const result = await prune(t.db, { retention: '30d', disabledRetention: '7d', logger: captureLogger() })
    expect(result).toEqual({ removed: 0, dropped: 5, caughtUp: true })
    expect(await rowsOf(id, 'p')).toEqual([
      [5, 'pending'],
      [6, 'pending'],
    ])
    expect(await rowsOf(id, 'q')).toEqual([
      [2, 'pending'],
      [3, 'pending'],
    ])
    // The park ended with its head, the stale claim and its takeover watch went with the head they were about.
    expect(await laneOf(id, 'q')).toMatchObject({
      blocked_reason: null,
      blocked_at: null,
      conflict_count: 0,
      claim_token: null,
      leased_until: null,
      watch_starts: false,
      started_token: null,
    })
    await expectLanesLive(t.db)

    // Enabled, the tails are delivered in order, at once: they no longer wait for a dropped head's backoff.
    await enableSubscription(t.db, id)
    const relay = stored.relay()
    await relay.start()
    await waitFor(() => sink.requests.length === 4, 'the tails delivered')
    const sequences = (aggregateId: string) =>
      sink.requests.filter((request) => request.json.aggregate_id === aggregateId).map((r) => r.json.sequence)
    expect(sequences('p')).toEqual([5, 6])
    expect(sequences('q')).toEqual([2, 3])
  })

  it('leaves a lane blocked by a dead letter blocked by it: the pending rows behind go, the blocker stays', async () => {
    const id = await subscribe('blocked')
    await publish('b', 4)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'b', 8)
    // 1 dead under 'block': 2..4 parked at infinity behind it.
    await sql`UPDATE outbox SET status = 'dead', dead_at = now() - interval '8 days', attempts = 8
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'b' AND sequence = 1`.execute(t.db)
    await sql`UPDATE outbox SET available_at = 'infinity'
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'b' AND status = 'pending'`.execute(t.db)
    await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now()
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'b'`.execute(t.db)
    await expectLanesLive(t.db)

    const result = await prune(t.db, {
      retention: '30d',
      disabledRetention: '7d',
      deadLetterRetention: '1d',
      logger: captureLogger(),
    })
    expect(result).toEqual({ removed: 0, dropped: 3, caughtUp: true })
    expect(await rowsOf(id, 'b')).toEqual([[1, 'dead']])
    expect(await laneOf(id, 'b')).toMatchObject({ blocked_reason: 'exhausted' })
    await expectLanesLive(t.db)
    // An event enqueued now still waits behind the block.
    await publish('b', 1)
    const { rows } = await sql<{
      at_infinity: boolean
    }>`SELECT available_at = 'infinity' AS at_infinity FROM outbox
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'b' AND sequence = 5`.execute(t.db)
    expect(rows).toEqual([{ at_infinity: true }])
    await expectLanesLive(t.db)
  })

  it('skips a lane under a live lease (not caught up) and drops it on a later run', async () => {
    const id = await subscribe('leased')
    await publish('l', 2)
    await publish('m', 2)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'l', 8)
    await enqueuedDaysAgo(id, 'm', 8)
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 minute'
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'l'`.execute(t.db)

    const logger = captureLogger()
    const first = await prune(t.db, { retention: '30d', disabledRetention: '7d', logger })
    expect(first).toEqual({ removed: 0, dropped: 2, caughtUp: false })
    expect(await rowsOf(id, 'l')).toHaveLength(2)
    expect(await rowsOf(id, 'm')).toEqual([])
    expect(logger.warnings[0]?.message).toMatch(/1 busy lane left for a later run/)
    await expectLanesLive(t.db)

    await sql`UPDATE outbox_lane SET leased_until = now() - interval '1 second'
      WHERE subscription_id = ${id}::uuid AND aggregate_id = 'l'`.execute(t.db)
    expect(await prune(t.db, { retention: '30d', disabledRetention: '7d', logger })).toEqual({
      removed: 0,
      dropped: 2,
      caughtUp: true,
    })
    expect(await rowsOf(id, 'l')).toEqual([])
    expect(await laneOf(id, 'l')).toMatchObject({ claim_token: null, leased_until: null })
    expect((await getSubscription(t.db, id))?.dropped).toBe(4)
    await expectLanesLive(t.db)
  })

  it('never waits for (nor deadlocks with) an enqueue held open on the aggregate; its event survives', async () => {
    const id = await subscribe('busy')
    await publish('h', 2)
    await publish('k', 1)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'h', 8)
    await enqueuedDaysAgo(id, 'k', 8)

    // A second connection enqueues on h and holds its transaction open: it holds h's counter row.
    const writer = t.connect({ max: 1 })
    const held = await writer.startTransaction().execute()
    try {
      await enqueue(held, {
        aggregateType: 'order',
        aggregateId: 'h',
        eventType: 'order.updated',
        payload: {},
      })
      const first = await prune(t.db, { retention: '30d', disabledRetention: '7d', logger: captureLogger() })
      expect(first).toEqual({ removed: 0, dropped: 1, caughtUp: false })
      expect(await rowsOf(id, 'k')).toEqual([])
    } finally {
      await held.commit().execute()
    }
    expect(await rowsOf(id, 'h')).toEqual([
      [1, 'pending'],
      [2, 'pending'],
      [3, 'pending'],
    ])
    // The next run cuts h's old prefix; the event that was held open is young and stays, as the lane's tail.
    expect(await prune(t.db, { retention: '30d', disabledRetention: '7d', logger: captureLogger() })).toEqual(
      {
        removed: 0,
        dropped: 2,
        caughtUp: true,
      },
    )
    expect(await rowsOf(id, 'h')).toEqual([[3, 'pending']])
    await expectLanesLive(t.db)
  })

  it('an enqueue that starts while a drop batch holds the lane waits for it and lands behind the cut', async () => {
    const id = await subscribe('racing')
    await publish('r', 3)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'r', 8)
    // The batch's lock on the subscription row is held by this transaction first, so the prune starts, then waits.
    const holder = t.connect({ max: 1 })
    const lock = await holder.startTransaction().execute()
    await sql`SELECT 1 FROM outbox_subscription WHERE id = ${id}::uuid FOR NO KEY UPDATE`.execute(lock)
    const pruning = prune(t.connect({ max: 1 }), {
      retention: '30d',
      disabledRetention: '7d',
      logger: captureLogger(),
    })
    await waitForLockWaiters(t.db)
    await lock.commit().execute()
    expect(await pruning).toEqual({ removed: 0, dropped: 3, caughtUp: true })
    await publish('r', 1)
    expect(await rowsOf(id, 'r')).toEqual([[4, 'pending']])
    await expectLanesLive(t.db)
  })

  it('an enableSubscription in flight wins: the prune waits for it, then drops nothing', async () => {
    const id = await subscribe('resumed')
    await publish('e', 3)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'e', 8)
    // What enableSubscription writes, in a transaction held open: the routing barrier, then the state.
    const enabler = t.connect({ max: 1 })
    const enabling = await enabler.startTransaction().execute()
    await sql`LOCK TABLE outbox_counter IN SHARE MODE`.execute(enabling)
    await sql`UPDATE outbox_subscription SET state = 'enabled', disabled_reason = NULL, disabled_at = NULL,
      updated_at = now() WHERE id = ${id}::uuid`.execute(enabling)
    const pruning = prune(t.connect({ max: 1 }), {
      retention: '30d',
      disabledRetention: '7d',
      logger: captureLogger(),
    })
    await waitForLockWaiters(t.db)
    await enabling.commit().execute()
    expect(await pruning).toEqual({ removed: 0, dropped: 0, caughtUp: true })
    expect(await rowsOf(id, 'e')).toHaveLength(3)
    expect((await getSubscription(t.db, id))?.dropped).toBe(0)
    await expectLanesLive(t.db)
  })

  it('works in batches of at most batchSize rows, a lane cut short resumed where it stopped; maxBatches bounds a run', async () => {
    const id = await subscribe('batched')
    await publish('x', 5)
    await publish('y', 3)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 8)
    await enqueuedDaysAgo(id, 'x', 8)
    await enqueuedDaysAgo(id, 'y', 8)

    const batches: number[] = []
    const onBatch = (batch: { status: string; removed: number }) => {
      if (batch.status === 'disabled') batches.push(batch.removed)
    }
    const first = await prune(t.db, {
      retention: '30d',
      disabledRetention: '7d',
      batchSize: 2,
      maxBatches: 2,
      onBatch,
      logger: captureLogger(),
    })
    expect(first).toEqual({ removed: 0, dropped: 4, caughtUp: false })
    expect(await rowsOf(id, 'x')).toEqual([[5, 'pending']])
    await expectLanesLive(t.db)
    const second = await prune(t.db, {
      retention: '30d',
      disabledRetention: '7d',
      batchSize: 2,
      onBatch,
      logger: captureLogger(),
    })
    expect(second).toEqual({ removed: 0, dropped: 4, caughtUp: true })
    expect(batches).toEqual([2, 2, 2, 2])
    expect(await rowsOf(id, 'x')).toEqual([])
    expect(await rowsOf(id, 'y')).toEqual([])
    expect((await getSubscription(t.db, id))?.dropped).toBe(8)
    await expectLanesLive(t.db)
  })

  it('refuses a bad disabledRetention by name, before touching anything', async () => {
    for (const bad of ['soon', true, -1, {}]) {
      const error = await prune(t.db, { retention: '30d', disabledRetention: bad as never }).catch((e) => e)
      expect(error).toBeInstanceOf(OutboxError)
      expect(error).toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'disabledRetention' })
    }
    await expect(stats(t.db, { disabledRetention: 'soon' })).rejects.toMatchObject({
      option: 'disabledRetention',
    })
  })
})

describe('outbox prune --disabled-retention', () => {
  it('keeps everything without the flag or with off; drops past the given retention, audited under --actor, said on stderr', async () => {
    buildCli()
    const id = await subscribe('cli')
    await publish('c', 2)
    await disableSubscription(t.db, id)
    await disabledDaysAgo(id, 10)
    await enqueuedDaysAgo(id, 'c', 10)
    const env = cliEnv({ DATABASE_URL: t.url })

    // Without the flag, and with 'off', they are kept, however long they were held.
    const kept = await runCli(['prune', '--retention', '30d', '--json'], env)
    expect(kept.code, kept.stderr).toBe(0)
    expect(JSON.parse(kept.stdout)).toMatchObject({ removed: 0, dropped: 0, caughtUp: true })
    const off = await runCli(['prune', '--retention', '30d', '--disabled-retention', 'off'], env)
    expect(off.code, off.stderr).toBe(0)
    expect(await rowsOf(id, 'c')).toHaveLength(2)

    const dropped = await runCli(
      ['prune', '--retention', '30d', '--disabled-retention', '2d', '--actor', 'ops-cron'],
      env,
    )
    expect(dropped.code, dropped.stderr).toBe(0)
    expect(dropped.stdout).toBe(
      'deleted 0 rows (0 sent, 0 dead letters); dropped 2 pending deliveries of disabled subscriptions past the disabled retention; caught up\n',
    )
    expect(dropped.stderr).toMatch(
      /prune: held deliveries of disabled subscriptions: batch 1, 2 dropped, 2 so far/,
    )
    expect(dropped.stderr).toMatch(
      /WARN +dropped 2 pending deliveries of disabled subscription cli.* subscription=cli/,
    )
    expect(await rowsOf(id, 'c')).toEqual([])
    expect(await dropsAudited()).toEqual([
      expect.objectContaining({
        actor: 'ops-cron',
        action: 'subscription.drop-pending',
        target: { subscriptionId: id, subscriptionName: 'cli', disabledRetentionMs: 2 * 86_400_000 },
        result: { dropped: 2, lanes: 1, skippedLanes: 0 },
      }),
    ])

    const bad = await runCli(['prune', '--retention', '30d', '--disabled-retention', 'soon'], env)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toMatch(/--disabled-retention/)
    await sleep(0)
  }, 120_000)
})
