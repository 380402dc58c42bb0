import { randomUUID } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeEach, describe, expect, it } from 'vitest'
import { migrate, pruneProcessed } from '../src/index.js'
import { countRows, quiet } from './support.js'

const t = useTestDatabase()

/** Inserts `count` processed ids received `ageDays` ago. */
async function seed(count: number, ageDays: number): Promise<void> {
  await t.db
    .insertInto('processed_events')
    .values(
      Array.from({ length: count }, (_, i) => ({
        event_id: randomUUID(),
        aggregate_type: 'order',
        aggregate_id: `agg-${i}`,
        sequence: 1,
        type: 'order.updated',
        received_at: sql<Date>`now() - make_interval(days => ${ageDays})`,
      })),
    )
    .execute()
}

beforeEach(async () => {
  await migrate(t.db)
})

describe('pruneProcessed, the same contract as the producer prune', () => {
  it('caughtUp is probed: a budget that ends exactly at the last expired row is caught up', async () => {
    await seed(20, 40)
    await seed(5, 1)
    const result = await pruneProcessed(t.db, {
      retention: '30d',
      batchSize: 10,
      maxBatches: 2,
      logger: quiet,
    })
    expect(result).toEqual({ removed: 20, caughtUp: true })
    expect(await countRows(t.db, 'processed_events')).toBe(5)
  })

  it('stops between batches when its signal aborts, saying it did not catch up', async () => {
    await seed(30, 40)
    const aborted = new AbortController()
    aborted.abort()
    expect(
      await pruneProcessed(t.db, { retention: '30d', batchSize: 10, logger: quiet, signal: aborted.signal }),
    ).toEqual({ removed: 0, caughtUp: false })
    const later = new AbortController()
    const result = pruneProcessed(t.db, {
      retention: '2w',
      batchSize: 10,
      pauseMs: 60_000,
      logger: quiet,
      signal: later.signal,
    })
    setTimeout(() => later.abort(), 50)
    expect(await result).toEqual({ removed: 10, caughtUp: false })
  })
})
