import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeEach, describe, expect, it } from 'vitest'
import {
  DEFAULT_OUTBOX_PRUNE_BATCH_SIZE,
  DEFAULT_OUTBOX_PRUNE_MAX_BATCHES,
  enqueue,
  type PruneOptions,
  parseDuration,
  prune,
} from '../src/index.js'

const t = useTestDatabase()

type Status = 'pending' | 'sent' | 'dead'

/**
 * Enqueues `count` events through the public API (so counters and lanes exist as in production), then moves them
 * to `status` with their timestamps `ageDays` in the past, as a relay would have left them.
 */
async function seed(label: string, count: number, status: Status, ageDays: number): Promise<void> {
  await t.db.transaction().execute(async (trx) => {
    for (let index = 0; index < count; index++) {
      await enqueue(
        trx,
        { aggregateType: label, aggregateId: String(index), eventType: 'x', payload: {} },
        { notify: false },
      )
    }
  })
  const age = sql`now() - ${ageDays} * interval '1 day'`
  await sql`
    UPDATE outbox SET
      status = ${status},
      created_at = ${age} - interval '1 minute',
      sent_at = CASE WHEN ${status} = 'sent' THEN ${age} END,
      dead_at = CASE WHEN ${status} = 'dead' THEN ${age} END
    WHERE aggregate_type = ${label}`.execute(t.db)
}

async function remaining(): Promise<Record<string, number>> {
  const rows = await t.db
    .selectFrom('outbox')
    .select(['aggregate_type', sql<string>`count(*)`.as('n')])
    .groupBy('aggregate_type')
    .execute()
  return Object.fromEntries(rows.map((row) => [row.aggregate_type, Number(row.n)]))
}

async function keyRows(): Promise<{ counters: number; lanes: number }> {
  const { rows } = await sql<{ counters: string; lanes: string }>`
    SELECT (SELECT count(*) FROM outbox_counter) AS counters, (SELECT count(*) FROM outbox_lane) AS lanes`.execute(
    t.db,
  )
  return { counters: Number(rows[0]!.counters), lanes: Number(rows[0]!.lanes) }
}

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

describe('prune', () => {
  it('removes only sent rows past retention, in batches no larger than batchSize', async () => {
    await seed('old_sent', 23, 'sent', 40)
    await seed('recent_sent', 5, 'sent', 1)
    await seed('old_pending', 4, 'pending', 40)
    await seed('old_dead', 3, 'dead', 40)
    const keys = await keyRows()

    const batches: { status: string; removed: number }[] = []
    const result = await prune(t.db, {
      retention: '30d',
      batchSize: 5,
      onBatch: (batch) => batches.push(batch),
    })

    expect(result).toEqual({ removed: 23, dropped: 0, caughtUp: true })
    expect(batches).toEqual([
      { status: 'sent', removed: 5 },
      { status: 'sent', removed: 5 },
      { status: 'sent', removed: 5 },
      { status: 'sent', removed: 5 },
      { status: 'sent', removed: 3 },
    ])
    expect(await remaining()).toEqual({ recent_sent: 5, old_pending: 4, old_dead: 3 })
    // Counters and lanes are never pruned: a pruned aggregate's next event continues its sequence.
    expect(await keyRows()).toEqual(keys)
    const next = await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'old_sent', aggregateId: '0', eventType: 'x', payload: {} }),
      )
    expect(next.sequence).toBe(2)
  })

  it('reports caughtUp: false when maxBatches stops it, and a later run finishes the work', async () => {
    await seed('old_sent', 23, 'sent', 40)
    const first = await prune(t.db, { retention: '30d', batchSize: 5, maxBatches: 2 })
    expect(first).toEqual({ removed: 10, dropped: 0, caughtUp: false })
    expect(await remaining()).toEqual({ old_sent: 13 })
    const second = await prune(t.db, { retention: '30d', batchSize: 5, maxBatches: 2 })
    expect(second).toEqual({ removed: 10, dropped: 0, caughtUp: false })
    const third = await prune(t.db, { retention: '30d', batchSize: 5, maxBatches: 2 })
    expect(third).toEqual({ removed: 3, dropped: 0, caughtUp: true })
    expect(await prune(t.db, { retention: '30d' })).toEqual({ removed: 0, dropped: 0, caughtUp: true })
  })

  it('reports caughtUp: true when the last allowed batch took exactly the last expired rows', async () => {
    await seed('old_sent', 10, 'sent', 40)
    expect(await prune(t.db, { retention: '30d', batchSize: 5, maxBatches: 2 })).toEqual({
      removed: 10,
      dropped: 0,
      caughtUp: true,
    })
  })

  it('takes retention in milliseconds too, and keeps rows younger than it', async () => {
    await seed('d40', 2, 'sent', 40)
    await seed('d31', 2, 'sent', 31)
    await seed('d20', 2, 'sent', 20)
    expect(await prune(t.db, { retention: 35 * 86_400_000 })).toEqual({
      removed: 2,
      dropped: 0,
      caughtUp: true,
    })
    expect(await remaining()).toEqual({ d31: 2, d20: 2 })
    expect(await prune(t.db, { retention: '3w' })).toEqual({ removed: 2, dropped: 0, caughtUp: true })
    expect(await remaining()).toEqual({ d20: 2 })
  })

  it('deletes dead letters only with deadLetterRetention, by their own age', async () => {
    await seed('old_dead', 4, 'dead', 40)
    await seed('recent_dead', 2, 'dead', 2)
    await seed('old_sent', 3, 'sent', 40)
    expect(await prune(t.db, { retention: '30d' })).toEqual({ removed: 3, dropped: 0, caughtUp: true })
    expect(await remaining()).toEqual({ old_dead: 4, recent_dead: 2 })

    const batches: { status: string; removed: number }[] = []
    const result = await prune(t.db, {
      retention: '30d',
      deadLetterRetention: '7d',
      batchSize: 3,
      onBatch: (batch) => batches.push(batch),
    })
    expect(result).toEqual({ removed: 4, dropped: 0, caughtUp: true })
    expect(batches).toEqual([
      { status: 'sent', removed: 0 },
      { status: 'dead', removed: 3 },
      { status: 'dead', removed: 1 },
    ])
    expect(await remaining()).toEqual({ recent_dead: 2 })
  })

  it('waits pauseMs between batches and stops when its signal is aborted', async () => {
    await seed('old_sent', 9, 'sent', 40)
    const started = performance.now()
    expect(await prune(t.db, { retention: '30d', batchSize: 4, pauseMs: 60 })).toEqual({
      removed: 9,
      dropped: 0,
      caughtUp: true,
    })
    // Three batches (4, 4, 1): two pauses.
    expect(performance.now() - started).toBeGreaterThanOrEqual(115)

    await seed('more_sent', 5, 'sent', 40)
    const controller = new AbortController()
    const result = await prune(t.db, {
      retention: '30d',
      batchSize: 2,
      signal: controller.signal,
      onBatch: () => controller.abort(),
    })
    expect(result).toEqual({ removed: 2, dropped: 0, caughtUp: false })
    expect(await remaining()).toEqual({ more_sent: 3 })
  })

  it('has documented defaults', () => {
    expect(DEFAULT_OUTBOX_PRUNE_BATCH_SIZE).toBe(5000)
    expect(DEFAULT_OUTBOX_PRUNE_MAX_BATCHES).toBe(200)
    expect(parseDuration('30d', 'retention')).toBe(2_592_000_000)
    expect(parseDuration('1.5h', 'x')).toBe(5_400_000)
    expect(parseDuration(' 90s ', 'x')).toBe(90_000)
    expect(parseDuration('500ms', 'x')).toBe(500)
  })

  it.each<[string, unknown, RegExp]>([
    ['no options', undefined, /prune needs \{ retention \}/],
    ['no retention', {}, /prune needs \{ retention \}/],
    [
      'a retention without unit',
      { retention: '30' },
      /retention must be milliseconds .* like '30d'.*got "30"/,
    ],
    ['an unknown unit', { retention: '1y' }, /retention must be milliseconds/],
    ['a negative retention', { retention: -1 }, /retention must be milliseconds \(a non-negative number\)/],
    ['a NaN retention', { retention: Number.NaN }, /retention must be milliseconds/],
    [
      'a bad deadLetterRetention',
      { retention: '30d', deadLetterRetention: 'forever' },
      /deadLetterRetention must be/,
    ],
    ['a zero batchSize', { retention: '30d', batchSize: 0 }, /batchSize must be a positive integer, got 0/],
    [
      'a fractional maxBatches',
      { retention: '30d', maxBatches: 1.5 },
      /maxBatches must be a positive integer/,
    ],
    ['a negative pauseMs', { retention: '30d', pauseMs: -5 }, /pauseMs must be milliseconds/],
    [
      'a bad schema',
      { retention: '30d', schema: 'Bad Schema' },
      /schema must be a lower-case SQL identifier/,
    ],
  ])('refuses %s with ERR_OUTBOX_INVALID_OPTION and deletes nothing', async (_label, options, message) => {
    await seed('old_sent', 2, 'sent', 400)
    await expect(prune(t.db, options as PruneOptions)).rejects.toMatchObject({
      name: 'OutboxError',
      code: 'ERR_OUTBOX_INVALID_OPTION',
      message: expect.stringMatching(message),
    })
    expect(await remaining()).toEqual({ old_sent: 2 })
  })
})
