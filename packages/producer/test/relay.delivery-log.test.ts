import { randomUUID } from 'node:crypto'
import { type Sink, type SinkAnswer, startSink, useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import {
  createSubscription,
  type DeliveryAttempt,
  deleteSubscription,
  disableSubscription,
  enableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  listDeliveryAttempts,
  migrate,
  prune,
  Relay,
  type RelayOptions,
  silentLogger,
} from '../src/index.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()
const sinks: Sink[] = []
const relays: Relay[] = []

async function sink(respond: (request: Sink['requests'][number]) => SinkAnswer | Promise<SinkAnswer>) {
  const started = await startSink(respond)
  sinks.push(started)
  return started
}

function relay(options: Partial<RelayOptions> & Pick<RelayOptions, 'db'>): Relay {
  const started = new Relay({
    logger: silentLogger,
    allowPrivateNetworks: true,
    retrySchedule: [0],
    ...options,
  })
  relays.push(started)
  return started
}

afterEach(async () => {
  await Promise.all(relays.splice(0).map((one) => one.stop({ timeoutMs: 0 })))
  await Promise.all(sinks.splice(0).map((one) => one.close()))
})

/** Every attempt of one aggregate (of the implicit subscription unless given), oldest first. */
async function history(aggregateId: string, subscriptionId?: string): Promise<DeliveryAttempt[]> {
  const newestFirst = await listDeliveryAttempts(t.db, {
    aggregateType: 'order',
    aggregateId,
    ...(subscriptionId === undefined ? {} : { subscriptionId }),
  })
  return newestFirst.reverse()
}

describe('the delivery log, written by the relay', () => {
  // Retries go at once: a failed lane is due again by the next runOnce.
  it('records each attempt with its outcome, status, duration and the answer cut to 500 characters', async () => {
    let flakyCalls = 0
    const endpoint = await sink(async (request) => {
      switch (request.json.aggregate_id) {
        case 'log-ok':
          await new Promise((resolve) => setTimeout(resolve, 40))
          return { status: 200, body: 'x'.repeat(2000) }
        case 'log-flaky':
          flakyCalls++
          return flakyCalls === 1 ? { status: 500, body: { error: 'boom' } } : { status: 200 }
        case 'log-conflict':
          return { status: 409, body: { code: 'sequence_gap' } }
        case 'log-poison':
          return { status: 422, body: { error: 'cannot process' } }
        default:
          return 'destroy'
      }
    })
    await seedEvents(t.db, ['log-ok', 'log-flaky', 'log-conflict', 'log-poison', 'log-down'], 1)
    const one = relay({ db: t.db, endpoint: endpoint.url, deliveryLog: 'all' })
    for (let pass = 0; pass < 3; pass++) await one.runOnce()

    const [ok, ...moreOk] = await history('log-ok')
    expect(moreOk).toEqual([])
    expect(ok).toMatchObject({
      subscriptionId: IMPLICIT_SUBSCRIPTION_ID,
      aggregateType: 'order',
      aggregateId: 'log-ok',
      sequence: 1,
      outcome: 'delivered',
      httpStatus: 200,
      error: null,
    })
    // The sink took 40 ms: the duration is the request's, measured by the relay.
    expect(ok!.durationMs).toBeGreaterThanOrEqual(35)
    expect(ok!.answer).toBe(`"${'x'.repeat(499)}`)
    const sent = await t.db
      .selectFrom('outbox')
      .select('event_id')
      .where('aggregate_id', '=', 'log-ok')
      .execute()
    expect(ok!.eventId).toBe(sent[0]!.event_id)

    expect((await history('log-flaky')).map((a) => [a.outcome, a.httpStatus, a.answer])).toEqual([
      ['failed', 500, '{"error":"boom"}'],
      ['delivered', 200, ''],
    ])
    const conflicts = await history('log-conflict')
    expect(conflicts.length).toBeGreaterThanOrEqual(1)
    for (const attempt of conflicts) {
      expect(attempt).toMatchObject({
        outcome: 'conflict',
        httpStatus: 409,
        answer: '{"code":"sequence_gap"}',
      })
    }
    expect((await history('log-poison')).map((a) => [a.outcome, a.httpStatus, a.answer, a.error])).toEqual([
      ['failed', 422, '{"error":"cannot process"}', null],
      ['dead', 422, '{"error":"cannot process"}', null],
    ])
    // No answer came: the error says why, and there is no status and no answer.
    const down = await history('log-down')
    expect(down.map((a) => [a.outcome, a.httpStatus, a.answer])).toEqual([
      ['failed', null, null],
      ['dead', null, null],
    ])
    expect(down[0]!.error).toMatch(/\S/)
    expect(down[0]!.durationMs).toEqual(expect.any(Number))
  })

  it('keeps one history per subscription for the same event (stored subscriptions log every attempt by default)', async () => {
    await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
    const created: string[] = []
    try {
      const steady = await sink(() => ({ status: 200, body: { status: 'applied' } }))
      let calls = 0
      const shaky = await sink(() => (++calls === 1 ? { status: 503 } : { status: 200 }))
      const a = await createSubscription(t.db, { url: steady.url, name: 'log-steady' })
      const b = await createSubscription(t.db, { url: shaky.url, name: 'log-shaky' })
      created.push(a.id, b.id)
      await seedEvents(t.db, ['log-both'], 1)
      const one = relay({ db: t.db })
      for (let pass = 0; pass < 3; pass++) await one.runOnce()

      const [{ event_id: eventId }] = (await t.db
        .selectFrom('outbox')
        .select('event_id')
        .where('aggregate_id', '=', 'log-both')
        .limit(1)
        .execute()) as [{ event_id: string }]
      const all = await listDeliveryAttempts(t.db, { eventId })
      expect(all).toHaveLength(3)
      expect((await history('log-both', a.id)).map((x) => [x.outcome, x.httpStatus, x.eventId])).toEqual([
        ['delivered', 200, eventId],
      ])
      expect((await history('log-both', b.id)).map((x) => [x.outcome, x.httpStatus, x.eventId])).toEqual([
        ['failed', 503, eventId],
        ['delivered', 200, eventId],
      ])
      expect(await listDeliveryAttempts(t.db, { eventId, subscriptionId: a.id })).toHaveLength(1)
    } finally {
      for (const id of created) await deleteSubscription(t.db, id)
      await enableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
    }
  })

  it('writes a batch of 2xx attempts in the mark flush: no statement of its own, however many deliveries', async () => {
    const endpoint = await sink(() => ({ status: 200 }))
    const statements: string[] = []
    const pool = new pg.Pool({ connectionString: t.url, max: 4 })
    // As the harness's pools: a connection cut when the file's database is dropped must not crash the run.
    pool.on('error', () => {})
    pool.on('connect', (client) => client.on('error', () => {}))
    const counted = new Kysely<any>({
      dialect: new PostgresDialect({ pool }),
      log: (event) => void statements.push(event.query.sql),
    })
    try {
      // A schema of its own: no lane left by another test is delivered (and counted) with these.
      const schema = 'log_batch'
      await migrate(t.db, { schema })
      const runWith = async (deliveryLog: RelayOptions['deliveryLog'], aggregateId: string) => {
        await seedEvents(t.db, [aggregateId], 40, { schema })
        statements.length = 0
        const one = relay({ db: counted, schema, endpoint: endpoint.url, deliveryLog, batchSize: 200 })
        const result = await one.runOnce()
        await one.stop()
        return { result, statements: [...statements] }
      }
      const logged = await runWith('all', 'log-batch-on')
      const unlogged = await runWith(false, 'log-batch-off')
      expect(logged.result).toMatchObject({ delivered: 40 })
      expect(unlogged.result).toMatchObject({ delivered: 40 })
      // 40 deliveries, 40 log rows, one statement that wrote them: the flush that marked them sent.
      const rows = await listDeliveryAttempts(t.db, { schema })
      expect(rows.map((a) => [a.aggregateId, a.outcome])).toEqual(
        Array(40).fill(['log-batch-on', 'delivered']),
      )
      expect(rows.map((a) => a.sequence).sort((x, y) => x - y)).toEqual(
        Array.from({ length: 40 }, (_, i) => i + 1),
      )
      // Every statement that wrote the log is a mark flush, which the relay runs with or without a log; the
      // flushes batch the deliveries (fewer statements than events), and nothing else changed.
      const isFlush = (text: string) => /UPDATE .*"outbox" o\s+SET status = 'sent'/s.test(text)
      const writers = logged.statements.filter((text) => text.includes('outbox_delivery_attempt'))
      expect(writers.length).toBeGreaterThan(0)
      expect(writers.length).toBeLessThan(40)
      expect(writers.every(isFlush)).toBe(true)
      expect(logged.statements.filter(isFlush)).toEqual(writers)
      expect(unlogged.statements.some((text) => text.includes('outbox_delivery_attempt'))).toBe(false)
      const others = (run: { statements: string[] }) => run.statements.filter((text) => !isFlush(text))
      expect(others(logged)).toEqual(others(unlogged))
    } finally {
      await counted.destroy()
    }
  })

  it("deliveryLog 'failures' records all but 2xx answers, and false records nothing", async () => {
    const endpoint = await sink((request) =>
      request.json.aggregate_id.endsWith('-bad') ? { status: 500 } : { status: 200 },
    )
    await seedEvents(t.db, ['log-f-good', 'log-f-bad'], 1)
    await relay({ db: t.db, endpoint: endpoint.url, deliveryLog: 'failures' }).runOnce()
    expect(await history('log-f-good')).toEqual([])
    expect((await history('log-f-bad')).map((a) => a.outcome)).toEqual(['failed'])

    // The endpoint's default is 'failures' (a row per 2xx would cost its relay too much throughput).
    await seedEvents(t.db, ['log-d-good', 'log-d-bad'], 1)
    await relay({ db: t.db, endpoint: endpoint.url }).runOnce()
    expect(await history('log-d-good')).toEqual([])
    expect((await history('log-d-bad')).map((a) => a.outcome)).toEqual(['failed'])

    await seedEvents(t.db, ['log-n-good', 'log-n-bad'], 1)
    await relay({ db: t.db, endpoint: endpoint.url, deliveryLog: false }).runOnce()
    expect(await history('log-n-good')).toEqual([])
    expect(await history('log-n-bad')).toEqual([])
    expect(() => relay({ db: t.db, endpoint: endpoint.url, deliveryLog: 'some' as never })).toThrow(
      expect.objectContaining({
        option: 'deliveryLog',
        message: "deliveryLog must be one of 'all', 'failures', false; got \"some\"",
      }),
    )
  })
})

/** Inserts log rows directly: the listing and pruning do not care who wrote them. */
async function insertAttempts(
  schema: string,
  rows: readonly {
    subscriptionId: string
    eventId: string
    aggregateId: string
    ageMs: number
    at?: string
  }[],
) {
  for (const row of rows) {
    await sql`
      INSERT INTO ${sql.id(schema, 'outbox_delivery_attempt')} (subscription_id, event_id, aggregate_type,
        aggregate_id, sequence, attempted_at, duration_ms, http_status, outcome, answer)
      VALUES (${row.subscriptionId}::uuid, ${row.eventId}::uuid, 'order', ${row.aggregateId}, 1,
        coalesce(${row.at ?? null}::timestamptz, now() - ${row.ageMs} * interval '1 millisecond'), 3, 200,
        'delivered', '')`.execute(t.db)
  }
}

describe('listDeliveryAttempts', () => {
  it('filters by subscription, event and aggregate, newest first, and pages without repeats or gaps', async () => {
    const schema = 'log_list'
    await migrate(t.db, { schema })
    const [s1, s2, e1, e2] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()]
    // Five rows in the same microsecond: only the id tells them apart, and paging must still see each once.
    const tie = '2026-01-01T00:00:00.123456Z'
    await insertAttempts(schema, [
      { subscriptionId: s1, eventId: e1, aggregateId: 'a1', ageMs: 0, at: tie },
      { subscriptionId: s2, eventId: e1, aggregateId: 'a1', ageMs: 0, at: tie },
      { subscriptionId: s1, eventId: e2, aggregateId: 'a2', ageMs: 0, at: tie },
      { subscriptionId: s1, eventId: e2, aggregateId: 'a2', ageMs: 0, at: tie },
      { subscriptionId: s2, eventId: e2, aggregateId: 'a2', ageMs: 0, at: tie },
      { subscriptionId: s1, eventId: e1, aggregateId: 'a1', ageMs: 60_000 },
      { subscriptionId: s1, eventId: e1, aggregateId: 'a1', ageMs: 1_000 },
    ])
    const all = await listDeliveryAttempts(t.db, { schema })
    expect(all).toHaveLength(7)
    const times = all.map((a) => a.attemptedAt.getTime())
    expect(times).toEqual([...times].sort((x, y) => y - x))

    const paged: DeliveryAttempt[] = []
    let after: string | undefined
    for (let page = 0; page < 10; page++) {
      const next = await listDeliveryAttempts(t.db, { schema, limit: 2, ...(after ? { after } : {}) })
      paged.push(...next)
      if (next.length < 2) break
      after = next.at(-1)!.cursor
    }
    expect(paged.map((a) => a.cursor)).toEqual(all.map((a) => a.cursor))
    expect(new Set(paged.map((a) => a.cursor)).size).toBe(7)

    expect(await listDeliveryAttempts(t.db, { schema, subscriptionId: s2 })).toHaveLength(2)
    expect(await listDeliveryAttempts(t.db, { schema, eventId: e2 })).toHaveLength(3)
    expect(await listDeliveryAttempts(t.db, { schema, eventId: e1, subscriptionId: s1 })).toHaveLength(3)
    const a2 = await listDeliveryAttempts(t.db, { schema, aggregateType: 'order', aggregateId: 'a2' })
    expect(a2.map((a) => a.eventId)).toEqual([e2, e2, e2])
    expect(await listDeliveryAttempts(t.db, { schema, aggregateType: 'order', aggregateId: 'a3' })).toEqual(
      [],
    )
  })

  it('refuses bad input, naming the option', async () => {
    const refusal = (options: object) =>
      listDeliveryAttempts(t.db, options).then(
        () => undefined,
        (error: { option?: string; message: string }) => error,
      )
    expect(await refusal({ after: 'yesterday' })).toMatchObject({
      option: 'after',
      message: 'after must be the cursor of a listed delivery attempt, got "yesterday"',
    })
    expect(await refusal({ eventId: '42' })).toMatchObject({
      option: 'eventId',
      message: 'eventId must be an event\'s id (a UUID), got "42"',
    })
    expect(await refusal({ aggregateType: 'order' })).toMatchObject({ option: 'aggregateId' })
    expect(await refusal({ limit: 0 })).toMatchObject({ option: 'limit' })
  })
})

describe('prune of the delivery log', () => {
  it('deletes log rows past deliveryLogRetention in bounded batches, and none without it', async () => {
    const schema = 'log_prune'
    await migrate(t.db, { schema })
    const day = 86_400_000
    const subscriptionId = randomUUID()
    await insertAttempts(schema, [
      ...Array.from({ length: 5 }, () => ({
        subscriptionId,
        eventId: randomUUID(),
        aggregateId: 'old',
        ageMs: 10 * day,
      })),
      ...Array.from({ length: 2 }, () => ({
        subscriptionId,
        eventId: randomUUID(),
        aggregateId: 'new',
        ageMs: day,
      })),
    ])
    const count = async () => (await listDeliveryAttempts(t.db, { schema, limit: 100 })).length

    expect(await prune(t.db, { schema, retention: '30d' })).toEqual({
      removed: 0,
      dropped: 0,
      caughtUp: true,
    })
    expect(await count()).toBe(7)

    const batches: { status: string; removed: number }[] = []
    const first = await prune(t.db, {
      schema,
      retention: '30d',
      deliveryLogRetention: '7d',
      batchSize: 2,
      maxBatches: 2,
      onBatch: (progress) => void batches.push(progress),
    })
    expect(first).toEqual({ removed: 4, dropped: 0, caughtUp: false })
    expect(batches.filter((b) => b.status === 'delivery-log')).toEqual([
      { status: 'delivery-log', removed: 2 },
      { status: 'delivery-log', removed: 2 },
    ])
    expect(await prune(t.db, { schema, retention: '30d', deliveryLogRetention: '7d', batchSize: 2 })).toEqual(
      {
        removed: 1,
        dropped: 0,
        caughtUp: true,
      },
    )
    const left = await listDeliveryAttempts(t.db, { schema })
    expect(left.map((a) => a.aggregateId)).toEqual(['new', 'new'])
  })
})
