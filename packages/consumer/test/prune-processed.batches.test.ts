import { randomUUID } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import request from 'supertest'
import { beforeEach, describe, expect, it } from 'vitest'
import { createConsumer, migrate, OutboxError, pruneProcessed } from '../src/index.js'
import { parseRetentionMs } from '../src/prune-processed.js'
import { appWith, countRows, delivery, makeEvent, quiet, recordingLogger } from './support.js'

const t = useTestDatabase()
const DAY_MS = 86_400_000

/** Inserts `count` processed ids received `ageDays` ago, spread over aggregates that all have cursors. */
async function seed(count: number, ageDays: number, schema?: string): Promise<void> {
  const own = schema === undefined ? t.db : t.db.withSchema(schema)
  const rows = Array.from({ length: count }, (_, i) => ({
    event_id: randomUUID(),
    aggregate_type: 'order',
    aggregate_id: `agg-${i % 50}`,
    sequence: i + 1,
    type: 'order.updated',
    received_at: sql<Date>`now() - make_interval(days => ${ageDays}) - make_interval(secs => ${i})`,
  }))
  for (let i = 0; i < rows.length; i += 1000)
    await own
      .insertInto('processed_events')
      .values(rows.slice(i, i + 1000))
      .execute()
  const cursors = Array.from({ length: 50 }, (_, i) => ({
    aggregate_type: 'order',
    aggregate_id: `agg-${i}`,
    last_sequence: count,
  }))
  await own
    .insertInto('consumer_cursors')
    .values(cursors)
    .onConflict((oc) => oc.doNothing())
    .execute()
}

beforeEach(async () => {
  await t.db.deleteFrom('processed_events').execute()
  await t.db.deleteFrom('consumer_cursors').execute()
})

describe('pruneProcessed', () => {
  it('removes ids older than the retention in bounded batches, keeps recent ids, never touches cursors', async () => {
    await seed(2500, 40)
    await seed(30, 1)
    const cursorsBefore = await t.db
      .selectFrom('consumer_cursors')
      .selectAll()
      .orderBy('aggregate_id')
      .execute()

    const first = await pruneProcessed(t.db, {
      retention: '30d',
      batchSize: 1000,
      maxBatches: 2,
      logger: quiet,
    })
    expect(first).toEqual({ removed: 2000, caughtUp: false })
    expect(await countRows(t.db, 'processed_events')).toBe(530)

    const second = await pruneProcessed(t.db, {
      retention: '30d',
      batchSize: 1000,
      maxBatches: 2,
      pauseMs: 5,
    })
    expect(second).toEqual({ removed: 500, caughtUp: true })
    expect(await countRows(t.db, 'processed_events')).toBe(30)

    expect(await pruneProcessed(t.db, { retention: 30 * DAY_MS })).toEqual({ removed: 0, caughtUp: true })
    expect(await t.db.selectFrom('consumer_cursors').selectAll().orderBy('aggregate_id').execute()).toEqual(
      cursorsBefore,
    )
  })

  it('deletes the oldest rows first', async () => {
    await seed(10, 40)
    await seed(10, 60)
    await pruneProcessed(t.db, { retention: '30d', batchSize: 10, maxBatches: 1 })
    const { oldest } = await t.db
      .selectFrom('processed_events')
      .select(sql<string>`floor(extract(epoch from now() - min(received_at)) / 86400)`.as('oldest'))
      .executeTakeFirstOrThrow()
    expect(Number(oldest)).toBe(40)
  })

  it('after an id is pruned, the cursor still stops its very late redelivery under monotonic; under off it re-applies', async () => {
    let applied = 0
    const monotonic = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet })
    const off = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, sequence: 'off' })
    const handler = async () => {
      applied++
    }
    for (const [consumer, expected] of [
      [monotonic, 'stale_ignored'],
      [off, 'applied'],
    ] as const) {
      const app = appWith(consumer.dedupe(handler))
      const first = makeEvent({ aggregateId: `late-${expected}`, sequence: 1 })
      const second = makeEvent({ aggregateId: `late-${expected}`, sequence: 2 })
      for (const event of [first, second]) {
        const { body, headers } = delivery(event)
        expect((await request(app).post('/hooks').set(headers).send(body)).body.status).toBe('applied')
      }
      await t.db
        .updateTable('processed_events')
        .set({ received_at: sql`now() - interval '90 days'` })
        .execute()
      await pruneProcessed(t.db, { retention: '30d' })
      expect(await countRows(t.db, 'processed_events')).toBe(0)
      const { body, headers } = delivery(first)
      expect((await request(app).post('/hooks').set(headers).send(body)).body.status).toBe(expected)
    }
    expect(applied).toBe(5)
  })

  it('works in a custom schema', async () => {
    await migrate(t.db, { schema: 'pruned' })
    await seed(20, 40, 'pruned')
    await seed(20, 40)
    expect(await pruneProcessed(t.db, { retention: '30d', schema: 'pruned' })).toEqual({
      removed: 20,
      caughtUp: true,
    })
    expect(await countRows(t.db, 'processed_events')).toBe(20)
  })

  it('warns when the retention is shorter than the producer retry horizon', async () => {
    const logger = recordingLogger()
    await pruneProcessed(t.db, { retention: '12h', logger })
    expect(logger.lines.some((line) => line.level === 'warn' && line.msg.includes('retry horizon'))).toBe(
      true,
    )
    const quietLogger = recordingLogger()
    await pruneProcessed(t.db, { retention: '30d', logger: quietLogger })
    expect(quietLogger.lines).toEqual([])
  })

  it('refuses bad options with ERR_OUTBOX_INVALID_OPTION', async () => {
    for (const options of [
      { retention: '30 days' },
      { retention: 0 },
      { retention: -5 },
      { retention: '30d', batchSize: 0 },
      { retention: '30d', maxBatches: 1.5 },
      { retention: '30d', pauseMs: -1 },
    ]) {
      const error = await pruneProcessed(t.db, options as never).catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(OutboxError)
      expect((error as OutboxError).code).toBe('ERR_OUTBOX_INVALID_OPTION')
    }
  })
})

describe('parseRetentionMs', () => {
  it('reads numbers and unit strings', () => {
    expect(parseRetentionMs(1500)).toBe(1500)
    expect(parseRetentionMs('500ms')).toBe(500)
    expect(parseRetentionMs('45s')).toBe(45_000)
    expect(parseRetentionMs('90m')).toBe(5_400_000)
    expect(parseRetentionMs('12h')).toBe(43_200_000)
    expect(parseRetentionMs('30d')).toBe(30 * DAY_MS)
    expect(() => parseRetentionMs('30w')).toThrow(/'30d'/)
  })
})
