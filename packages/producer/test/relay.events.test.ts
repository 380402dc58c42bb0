import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { type Logger, Relay, type RelayEventMap, silentLogger } from '../src/index.js'
import { seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

type Seen = { [K in keyof RelayEventMap]?: RelayEventMap[K][] }

function record(relay: Relay): Seen {
  const seen: Seen = {}
  const names: (keyof RelayEventMap)[] = [
    'delivery:success',
    'delivery:retry',
    'delivery:dead',
    'delivery:stale',
    'lane:blocked',
    'lane:takeover',
    'relay:error',
    'relay:started',
    'relay:stopped',
  ]
  for (const name of names) {
    relay.on(name, (payload) => {
      const list = (seen[name] ?? []) as unknown[]
      list.push(payload)
      seen[name] = list as never
    })
  }
  return seen
}

describe('relay events and logging', () => {
  it('each delivery event fires for its cause, with the event and lane in its payload', async () => {
    await seedEvents(t.db, ['ok', 'stale', 'retry', 'dead', 'gap', 'block'], 1)
    const answers = { retry: 0 }
    const sink = await startSink((request) => {
      const id = request.json.aggregate_id as string
      if (id === 'stale') return { status: 200, body: { status: 'stale_ignored' } }
      if (id === 'retry')
        return answers.retry++ === 0 ? { status: 500 } : { status: 200, body: { status: 'applied' } }
      if (id === 'dead' || id === 'block') return { status: 400 }
      if (id === 'gap') return { status: 409 }
      return { status: 200, body: { status: 'applied' } }
    })
    const logged: { level: string; fields: Record<string, unknown>; message: string }[] = []
    const logger: Logger = {
      debug: () => {},
      info: (fields, message) => logged.push({ level: 'info', fields, message }),
      warn: (fields, message) => logged.push({ level: 'warn', fields, message }),
      error: (fields, message) => logged.push({ level: 'error', fields, message }),
    }
    const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [0], logger })
    const blocking = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: [],
      onExhausted: 'block',
      logger: silentLogger,
    })
    const seen = record(relay)
    const seenBlocking = record(blocking)
    // A listener that throws must not break delivery.
    relay.on('delivery:success', () => {
      throw new Error('listener bug')
    })
    try {
      await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'block'`.execute(t.db)
      await relay.runOnce()
      await relay.runOnce()
      await sql`UPDATE outbox SET available_at = now() WHERE aggregate_id = 'block'`.execute(t.db)
      await sql`UPDATE outbox SET available_at = 'infinity' WHERE status = 'pending' AND aggregate_id <> 'block'`.execute(
        t.db,
      )
      await blocking.runOnce()
    } finally {
      await sink.close()
    }
    const ids = (list: { aggregateId: string }[] | undefined) =>
      (list ?? []).map((one) => one.aggregateId).sort()
    expect(ids(seen['delivery:success'])).toEqual(['ok', 'retry', 'stale'])
    expect(seen['delivery:success']!.find((one) => one.aggregateId === 'stale')).toMatchObject({
      deliveryStatus: 'stale_ignored',
      httpStatus: 200,
      sequence: 1,
      eventType: 'order.updated',
    })
    expect(ids(seen['delivery:stale'])).toEqual(['stale'])
    expect(ids(seen['delivery:retry'])).toEqual(['dead', 'retry'])
    expect(seen['delivery:retry']!.find((one) => one.aggregateId === 'retry')).toMatchObject({
      attempts: 1,
      httpStatus: 500,
    })
    expect(ids(seen['delivery:dead'])).toEqual(['dead'])
    expect(seen['delivery:dead']![0]).toMatchObject({ attempts: 2, httpStatus: 400, onExhausted: 'skip' })
    // On a slow machine the second pass may find the short 409 park over and park the lane again.
    expect(seen['lane:blocked']!.length).toBeGreaterThanOrEqual(1)
    for (const blocked of seen['lane:blocked']!) {
      expect(blocked).toMatchObject({ aggregateId: 'gap', reason: 'conflict' })
    }
    expect(seenBlocking['lane:blocked']).toEqual([
      expect.objectContaining({ aggregateId: 'block', reason: 'exhausted', retryInMs: null }),
    ])
    expect(seenBlocking['delivery:dead']).toEqual([
      expect.objectContaining({ aggregateId: 'block', onExhausted: 'block' }),
    ])

    expect(logged.find((entry) => entry.message.includes('listener threw'))).toBeDefined()
    const retryLog = logged.find(
      (entry) => entry.message === 'delivery failed; will retry' && entry.fields.lane === 'order:retry',
    )
    expect(retryLog?.fields).toMatchObject({ lane: 'order:retry', attempts: 1, status: 500 })
    expect(retryLog?.fields.eventId).toEqual(expect.any(String))
    expect(
      logged.find((entry) => entry.level === 'error' && entry.message === 'event dead-lettered')?.fields,
    ).toMatchObject({ lane: 'order:dead' })
  })

  it('lane:takeover fires when a claim expired without an outcome: free if only claimed, charged if its request had started', async () => {
    await seedEvents(t.db, ['claimed-only', 'started', 'started-alone'], 1)
    // Both claims expired; 'started' was watched and its claim had recorded the start of a request.
    await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() - interval '1 second'`.execute(
      t.db,
    )
    await sql`UPDATE outbox_lane SET watch_starts = true, started_token = claim_token WHERE aggregate_id LIKE 'started%'`.execute(
      t.db,
    )
    // 'started-alone' was sent alone by the dead relay: its charge is a proven attempt.
    await sql`UPDATE outbox_lane SET started_alone = true WHERE aggregate_id = 'started-alone'`.execute(t.db)
    const sink = await startSink()
    const relay = new Relay({ db: t.db, endpoint: sink.url, logger: silentLogger })
    const seen = record(relay)
    try {
      await relay.runOnce()
    } finally {
      await sink.close()
    }
    const takeovers = (seen['lane:takeover'] ?? []).map(
      ({ aggregateId, charged, provisional, attempts }) => ({
        aggregateId,
        charged,
        provisional,
        attempts,
      }),
    )
    // The charged one's charge is provisional (its request was not started alone): no attempt is counted for it.
    expect(takeovers.sort((a, b) => a.aggregateId.localeCompare(b.aggregateId))).toEqual([
      { aggregateId: 'claimed-only', charged: false, provisional: false, attempts: 0 },
      { aggregateId: 'started', charged: true, provisional: true, attempts: 0 },
      { aggregateId: 'started-alone', charged: true, provisional: false, attempts: 1 },
    ])
    // The free one is delivered at once; the charged one is retried on the schedule. Its charge is provisional (the
    // dead claim had not started its request alone), so it counts no attempt: its attempts stay 0.
    expect(seen['delivery:success']).toEqual([
      expect.objectContaining({ aggregateId: 'claimed-only', attempts: 1 }),
    ])
    expect((seen['delivery:retry'] ?? []).sort((a, b) => a.aggregateId.localeCompare(b.aggregateId))).toEqual(
      [
        expect.objectContaining({
          aggregateId: 'started',
          attempts: 0,
          httpStatus: null,
          retryInMs: expect.any(Number),
        }),
        expect.objectContaining({ aggregateId: 'started-alone', attempts: 1, httpStatus: null }),
      ],
    )
    expect(sink.requests.map((request) => request.json.aggregate_id)).toEqual(['claimed-only'])
  })

  it('relay:error reports a failing claim and the relay keeps running; started/stopped bracket its life; no-listen is logged once', async () => {
    const warnings: string[] = []
    const relay = new Relay({
      db: t.db,
      endpoint: 'http://127.0.0.1:9/hooks',
      schema: 'no_such_schema',
      pollIntervalMs: 10,
      logger: { ...silentLogger, warn: (_fields, message) => warnings.push(message) },
    })
    const seen = record(relay)
    await relay.start()
    await waitFor(() => (seen['relay:error']?.length ?? 0) >= 2, 'claim errors')
    expect(relay.running).toBe(true)
    await relay.stop()
    expect(seen['relay:error']![0]!.during).toBe('claim')
    expect(seen['relay:started']).toHaveLength(1)
    expect(seen['relay:stopped']).toHaveLength(1)
    expect(warnings.filter((message) => message.startsWith('LISTEN wake-ups are off'))).toHaveLength(1)
  })
})
