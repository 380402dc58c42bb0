import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { throughput } from '../src/index.js'
import { seedEvents, storeSubscriptions } from './support.js'

const t = useTestDatabase()

let ids: Record<string, string> = {}

beforeAll(async () => {
  ids = await storeSubscriptions(t.db, { a: {}, b: {} })
  // Every event goes to a and b: 6 rows of aggregate x per subscription.
  await seedEvents(t.db, ['x'], 6)
})

/**
 * Marks rows sent at `minutesAgo` whole minutes before the current minute's start (+10 s), in the transaction the
 * count then runs in: one `now()` for both, so no minute can roll over between them.
 */
function markSent(trx: any, subscription: string, sequences: number[], minutesAgo: number) {
  return sql`UPDATE outbox SET status = 'sent',
      sent_at = date_trunc('minute', now()) - make_interval(mins => ${minutesAgo}) + interval '10 seconds'
    WHERE subscription_id = ${ids[subscription]}::uuid AND sequence = ANY(${sequences})`.execute(trx)
}

describe('throughput', () => {
  it('counts sent rows per bucket by the database clock, zero buckets included, the current one last', async () => {
    await t.db.transaction().execute(async (trx) => {
      await markSent(trx, 'a', [1, 2, 3], 0)
      await markSent(trx, 'a', [4], 2)
      await markSent(trx, 'b', [1, 2], 2)
      // Outside the 5-minute window: not counted.
      await markSent(trx, 'b', [3], 7)
      const all = await throughput(trx, { windowMs: 5 * 60_000, bucketMs: 60_000 })
      expect(all.map((bucket) => bucket.sent)).toEqual([0, 0, 3, 0, 3])
      const { rows } = await sql<{ minute: Date }>`SELECT date_trunc('minute', now()) AS minute`.execute(trx)
      expect(all.at(-1)!.at.getTime()).toBe(rows[0]!.minute.getTime())
      expect(all[0]!.at.getTime()).toBe(rows[0]!.minute.getTime() - 4 * 60_000)
      const onlyB = await throughput(trx, { windowMs: 5 * 60_000, bucketMs: 60_000, subscriptionId: ids.b })
      expect(onlyB.map((bucket) => bucket.sent)).toEqual([0, 0, 2, 0, 0])
      // Wider buckets sum the narrow ones: three 5-minute buckets, aligned on the epoch, reach at least 10 minutes
      // back (the row 7 minutes ago included, wherever in its 5 minutes now falls).
      const wide = await throughput(trx, { windowMs: 15 * 60_000, bucketMs: 5 * 60_000 })
      expect(wide).toHaveLength(3)
      expect(wide.reduce((sum, bucket) => sum + bucket.sent, 0)).toBe(7)
    })
  })

  it('rejects a bad window, bucket or subscription id, naming the option', async () => {
    await expect(throughput(t.db, { bucketMs: 0 })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'bucketMs',
    })
    await expect(throughput(t.db, { windowMs: 86_400_000 * 2, bucketMs: 1000 })).rejects.toThrow(/buckets/)
    await expect(throughput(t.db, { subscriptionId: 'nope' })).rejects.toMatchObject({
      option: 'subscriptionId',
    })
  })
})
