import { useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { type EnqueueInput, enqueueMany } from '../src/index.js'
import { markSentAndRelease } from '../src/sql/mark-sent.js'

const t = useTestDatabase()

describe('mark flush beside a large backlog', () => {
  it('looks up each released lane on the pending-lane index: its cost does not grow with the pending rows', async () => {
    // A large pending backlog (one subscription's, as when its endpoint is slow, failing or paused), analyzed.
    for (let start = 0; start < 20_000; start += 2000) {
      const events: EnqueueInput<unknown>[] = Array.from({ length: 2000 }, (_, i) => ({
        aggregateType: 'account',
        aggregateId: String((start + i) % 500),
        eventType: 'ledger.entry',
        payload: { n: start + i },
      }))
      await t.db.transaction().execute((trx) => enqueueMany(trx, events, { notify: false }))
    }
    // The statement a flush of 200 marks and 200 releases really sends, captured, then explained on its connection.
    const queries: { sql: string; parameters: readonly unknown[] }[] = []
    const pool = new pg.Pool({ connectionString: t.url, max: 1 })
    const db = new Kysely<any>({
      dialect: new PostgresDialect({ pool }),
      log: (event) => {
        if (event.level === 'query') queries.push(event.query)
      },
    })
    try {
      // Lanes under claims, as a relay holds them while it delivers (their leases are what a flush ends).
      await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 minute'`.execute(
        db,
      )
      await sql`ANALYZE`.execute(db)
      const { rows: heads } = await sql<{ id: string; claim_token: string }>`
        SELECT DISTINCT ON (o.aggregate_id) o.id, l.claim_token FROM outbox o
        JOIN outbox_lane l USING (subscription_id, aggregate_type, aggregate_id)
        ORDER BY o.aggregate_id, o.sequence LIMIT 200`.execute(db)
      const tokens = heads.map((head) => head.claim_token)
      await markSentAndRelease(
        { db, schema: 'public' },
        {
          marks: heads.map(({ id, claim_token: claimToken }) => ({
            id,
            claimToken,
            httpStatus: 200,
            deliveryStatus: 'applied',
            attemptedAt: new Date(),
          })),

          releases: tokens.map((claimToken) => ({ claimToken, delivered: true })),
        },
      )
      const flush = queries.find((query) => /released_with_work/.test(query.sql))!
      const { rows } = await pool.query(`EXPLAIN ${flush.sql}`, [...flush.parameters])
      const plan = rows.map((line: Record<string, string>) => line['QUERY PLAN']).join('\n')
      // The count of released lanes with work left reads no more than their own pending rows.
      expect(plan).not.toMatch(/Seq Scan on outbox\b/)
      expect(plan).toMatch(/outbox_pending_lane_idx/)
    } finally {
      await db.destroy()
    }
  })
})
