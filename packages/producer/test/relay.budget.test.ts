import { startSink, useTestDatabase } from '@outbox/test-harness'
import fc from 'fast-check'
import { sql } from 'kysely'
import { beforeEach, describe, expect, it } from 'vitest'
import { enqueue, Relay, silentLogger, stats } from '../src/index.js'
import { relayTestHooks } from '../src/relay.js'
import { systemClock } from '../src/runtime.js'
import { claimLanes } from '../src/sql/claim-lanes.js'
import { selectLaneEvents } from '../src/sql/select-lane-events.js'

const t = useTestDatabase()

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

/** Enqueues one event per entry of `sizes[lane]`, each with a payload of about that many bytes. */
async function seedSized(sizes: readonly (readonly number[])[]): Promise<void> {
  for (let step = 0; step < Math.max(...sizes.map((lane) => lane.length)); step++) {
    await t.db.transaction().execute(async (trx) => {
      for (const [lane, lengths] of sizes.entries()) {
        const length = lengths[step]
        if (length === undefined) continue
        await enqueue(
          trx,
          {
            aggregateType: 'doc',
            aggregateId: `d${lane}`,
            eventType: 'doc.saved',
            payload: 'x'.repeat(length),
          },
          { notify: false },
        )
      }
    })
  }
}

describe('byte budget of a claim', () => {
  it('a claim never returns more payload bytes than its budget, spends it heads first, and leaves out lanes that do not fit', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.integer({ min: 10, max: 3000 }), { minLength: 1, maxLength: 6 }), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.integer({ min: 100, max: 12_000 }),
        async (sizes, maxBytes) => {
          await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
          await seedSized(sizes)
          const { lanes, budgetFull } = await claimLanes(
            { db: t.db, schema: 'public' },
            {
              lanes: 10,
              leaseMs: 60_000,
              scanRows: 256,
              batchSize: 10,
              maxBytes,
              clock: systemClock,
            },
          )
          const rows = lanes.flatMap((lane) => lane.events)
          const total = rows.reduce((sum, row) => sum + row.payloadBytes, 0)
          // Within the budget — or a single head larger than all of it, which must come alone or never move.
          if (rows.length === 1) expect(lanes).toHaveLength(1)
          else expect(total).toBeLessThanOrEqual(maxBytes)
          for (const row of rows) expect(row.payloadBytes).toBe(Buffer.byteLength(row.payload))
          for (const lane of lanes) {
            // Every claimed lane got its head, and a contiguous run behind it.
            expect(lane.events.map((event) => event.sequence)).toEqual(lane.events.map((_, n) => n + 1))
          }
          // Heads first: a lane got a second row only if every claimed lane got its first.
          if (lanes.some((lane) => lane.events.length > 1)) {
            expect(lanes.every((lane) => lane.events.length >= 1)).toBe(true)
          }
          // A lane left out was not leased.
          const { rows: leased } = await sql<{ n: string }>`
            SELECT count(*) AS n FROM outbox_lane WHERE claim_token IS NOT NULL`.execute(t.db)
          expect(Number(leased[0]!.n)).toBe(lanes.length)
          expect(budgetFull).toBe(lanes.length < sizes.length)
        },
      ),
      { numRuns: 40 },
    )
  })

  it('reading on past a batch spends what is left of the budget too, and always takes at least one row', async () => {
    await seedSized([[100, 100, 100, 100, 100, 100]])
    const {
      lanes: [lane],
    } = await claimLanes(
      { db: t.db, schema: 'public' },
      {
        lanes: 1,
        leaseMs: 60_000,
        scanRows: 256,
        batchSize: 2,
        maxBytes: 10_000,
        clock: systemClock,
      },
    )
    const next = (maxBytes: number) =>
      selectLaneEvents(
        { db: t.db, schema: 'public' },
        {
          claimToken: lane!.claimToken,
          afterSequence: 2,
          batchSize: 10,
          maxBytes,
        },
      )
    expect((await next(250)).map((row) => row.sequence)).toEqual([3, 4])
    expect((await next(10)).map((row) => row.sequence)).toEqual([3])
  })

  it('a relay with a small buffer budget delivers everything in order, holding no more than the budget plus one event', async () => {
    const budget = 4096
    const largest = 5000
    await seedSized([
      [900, 900, 900, 900],
      [1500, largest, 100],
      [300, 300, 300, 300, 300, 300],
      [2000, 2000],
    ])
    let relay: Relay | undefined
    let worst = 0
    const sink = await startSink(() => {
      worst = Math.max(worst, relayTestHooks(relay!).activity().heldBytes)
      return { status: 200, body: { status: 'applied' } }
    })
    relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      maxBufferedBytes: budget,
      concurrency: 4,
      batchSize: 3,
      pollIntervalMs: 10,
      logger: silentLogger,
    })
    try {
      await relay.start()
      for (let n = 0; n < 500 && (await stats(t.db)).pending > 0; n++)
        await new Promise((r) => setTimeout(r, 20))
    } finally {
      await relay.stop()
      await sink.close()
    }
    expect((await stats(t.db)).pending).toBe(0)
    expect(worst).toBeGreaterThan(0)
    expect(worst).toBeLessThanOrEqual(budget + largest + 2)
    const byLane = new Map<string, number[]>()
    for (const request of sink.requests) {
      const list = byLane.get(request.json.aggregate_id) ?? []
      list.push(request.json.sequence)
      byLane.set(request.json.aggregate_id, list)
    }
    expect(Object.fromEntries(byLane)).toEqual({
      d0: [1, 2, 3, 4],
      d1: [1, 2, 3],
      d2: [1, 2, 3, 4, 5, 6],
      d3: [1, 2],
    })
  })
})
