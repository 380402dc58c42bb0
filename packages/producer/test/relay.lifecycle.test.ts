import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, describe, expect, it } from 'vitest'
import { Relay, silentLogger } from '../src/index.js'
import { expectLanesLive, seedEvents, waitFor, waitForLockWaiters } from './support.js'

const t = useTestDatabase()

/** Lanes of aggregates whose id starts with `prefix` that hold a lease. */
async function leasedLanes(prefix: string): Promise<number> {
  const { rows } = await sql<{ leased: string }>`
    SELECT count(*) FILTER (WHERE claim_token IS NOT NULL) AS leased FROM outbox_lane
    WHERE aggregate_id LIKE ${`${prefix}%`}`.execute(t.db)
  return Number(rows[0]!.leased)
}

/** A transaction holding the lane table locked: a relay's claim waits behind it, as behind DDL or a slow server. */
async function lockLaneTable() {
  const holder = await t.db.startTransaction().execute()
  await sql`LOCK TABLE outbox_lane IN ACCESS EXCLUSIVE MODE`.execute(holder)
  return holder
}

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

describe('relay lifecycle', () => {
  it("after stop(), a second relay delivers the stopped relay's remaining lane events long before their leases end", async () => {
    await seedEvents(t.db, ['stop-a', 'stop-b'], 30)
    const sink = await startSink(async () => {
      await new Promise((resolve) => setTimeout(resolve, 20))
      return { status: 200, body: { status: 'applied' } }
    })
    // Leases of 10 min: the second relay, waiting at most one minute, can only have the lanes because stop() handed
    // them back, whatever the machine's speed.
    const first = new Relay({ db: t.db, endpoint: sink.url, leaseMs: 600_000, logger: silentLogger })
    const second = new Relay({
      db: t.connect(),
      endpoint: sink.url,
      pollIntervalMs: 50,
      logger: silentLogger,
    })
    try {
      await first.start()
      await first.start() // idempotent
      await waitFor(() => sink.requests.length >= 6, 'the first relay to be mid-lane')
      await Promise.all([first.stop({ timeoutMs: 5000 }), first.stop({ timeoutMs: 5000 })])
      expect(first.running).toBe(false)
      const lanes = await t.db
        .selectFrom('outbox_lane')
        .selectAll()
        .where('aggregate_id', 'like', 'stop-%')
        .execute()
      expect(lanes.every((lane) => lane.claim_token === null)).toBe(true)
      const delivered = sink.requests.length
      await second.start()
      await waitFor(() => sink.requests.length > delivered, 'the second relay to pick the lanes up', 60_000)
      await waitFor(
        () => new Set(sink.requests.map((r) => r.json.event_id)).size === 60,
        'all 60 events',
        20_000,
      )
    } finally {
      await first.stop()
      await second.stop()
      await sink.close()
    }
    // Stopping between requests loses nothing and reorders nothing.
    const last = new Map<string, number>()
    for (const request of sink.requests) {
      const id = request.json.aggregate_id
      expect(request.json.sequence).toBeLessThanOrEqual((last.get(id) ?? 0) + 1)
      last.set(id, Math.max(last.get(id) ?? 0, request.json.sequence))
    }
  })

  it('claims lanes ahead of its free slots, and stop() hands those back unopened', async () => {
    const ids = Array.from({ length: 8 }, (_, n) => `ahead-${n}`)
    await seedEvents(t.db, ids, 3)
    let inFlight = 0
    let mostInFlight = 0
    const sink = await startSink(async () => {
      mostInFlight = Math.max(mostInFlight, ++inFlight)
      await new Promise((resolve) => setTimeout(resolve, 30))
      inFlight -= 1
      return { status: 200, body: { status: 'applied' } }
    })
    const relay = new Relay({ db: t.db, endpoint: sink.url, concurrency: 2, logger: silentLogger })
    const leased = async () =>
      (
        await t.db
          .selectFrom('outbox_lane')
          .select('aggregate_id')
          .where('aggregate_id', 'like', 'ahead-%')
          .where('claim_token', 'is not', null)
          .execute()
      ).length
    try {
      await relay.start()
      await waitFor(() => sink.requests.length >= 1, 'the first delivery')
      // Two lanes in delivery and two more claimed and waiting, so a finished lane's slot never waits on a claim.
      expect(await leased()).toBe(4)
      // Only two lanes are ever in delivery at once.
      expect(mostInFlight).toBeLessThanOrEqual(2)
      await relay.stop({ timeoutMs: 5000 })
      expect(await leasedLanes('giveback-')).toBe(0)
    } finally {
      await relay.stop()
      await sink.close()
      // The lanes left pending would otherwise go first in the next test of this database.
      await t.db.deleteFrom('outbox').where('aggregate_id', 'like', 'ahead-%').execute()
    }
  })

  it('stop({ timeoutMs }) aborts a request that outlives it, counts no attempt, and releases the lane', async () => {
    await seedEvents(t.db, ['abort-1'], 2)
    const sink = await startSink(() => 'hang')
    // The request would outlive any test (10 min): only the abort at timeoutMs can end stop() within the ceiling.
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      requestTimeoutMs: 600_000,
      leaseMs: 700_000,
      logger: silentLogger,
    })
    try {
      await relay.start()
      await waitFor(() => sink.requests.length === 1, 'the hanging request')
      let ceiling: NodeJS.Timeout | undefined
      const outcome = await Promise.race([
        relay.stop({ timeoutMs: 200 }).then(() => 'stopped'),
        new Promise((resolve) => {
          ceiling = setTimeout(() => resolve('still waiting on the request'), 60_000)
        }),
      ])
      clearTimeout(ceiling)
      expect(outcome).toBe('stopped')
    } finally {
      await sink.close()
    }
    const rows = await t.db.selectFrom('outbox').selectAll().where('aggregate_id', '=', 'abort-1').execute()
    expect(rows.map((row) => [row.status, row.attempts])).toEqual([
      ['pending', 0],
      ['pending', 0],
    ])
    const lane = await t.db
      .selectFrom('outbox_lane')
      .selectAll()
      .where('aggregate_id', '=', 'abort-1')
      .executeTakeFirstOrThrow()
    expect(lane.claim_token).toBeNull()
  })

  it('await using stops the relay at the end of the scope; a stopped relay cannot be restarted', async () => {
    const sink = await startSink()
    let relay: Relay | undefined
    {
      await using scoped = new Relay({ db: t.db, endpoint: sink.url, logger: silentLogger })
      relay = scoped
      await scoped.start()
      expect(scoped.running).toBe(true)
    }
    expect(relay.running).toBe(false)
    await expect(relay.start()).rejects.toThrow(/create a new Relay/)
    await sink.close()
  })

  it('a claim that outlasts stop() and its grace hands its lanes back itself when it returns', async () => {
    await seedEvents(t.db, ['late-1', 'late-2'], 1)
    const versions = async () =>
      (
        await sql<{ version: string }>`SELECT xmin::text AS version FROM outbox_lane
          WHERE aggregate_id LIKE 'late-%' ORDER BY aggregate_id`.execute(t.db)
      ).rows.map((row) => row.version)
    const before = await versions()
    const sink = await startSink()
    const relay = new Relay({ db: t.connect(), endpoint: sink.url, pollIntervalMs: 10, logger: silentLogger })
    const holder = await lockLaneTable()
    try {
      await relay.start()
      await waitForLockWaiters(t.db)
      await relay.stop({ timeoutMs: 50 })
      expect(relay.running).toBe(false)
      await holder.commit().execute()
      // The claim now goes through and leases both lanes (their rows are written), for a relay that has stopped:
      // they must come back at once, not after the 60 s lease.
      await waitFor(
        async () => (await versions()).every((version, n) => version !== before[n]),
        'the late claim to run',
      )
      await waitFor(
        async () => (await leasedLanes('late-')) === 0,
        'the late claim to be handed back',
        // Half the lease: generous for a loaded machine, and still short of the lease's end.
        30_000,
      )
      expect(sink.requests).toHaveLength(0)
    } finally {
      await holder
        .rollback()
        .execute()
        .catch(() => {})
      await sink.close()
    }
  })

  it('stop() resolves only once the lanes of a claim that returned while it stopped are handed back', async () => {
    await seedEvents(t.db, ['giveback-1', 'giveback-2'], 1)
    // Each release of a lease is slow, as on a busy server: without waiting for it, stop() resolves before it lands.
    // (0.05 s a lane: far inside stop()'s 2 s grace for the hand-back, however slow the machine.)
    await sql`CREATE FUNCTION slow_release() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$`.execute(t.db)
    await sql`CREATE TRIGGER slow_release BEFORE UPDATE ON outbox_lane FOR EACH ROW
      WHEN (OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL) EXECUTE FUNCTION slow_release()`.execute(
      t.db,
    )
    const sink = await startSink()
    const relay = new Relay({ db: t.connect(), endpoint: sink.url, pollIntervalMs: 10, logger: silentLogger })
    // The relay's first claim waits behind this lock until stop() has begun, then returns both lanes to a relay
    // that is stopping: it hands them back unsent, by a write of its own.
    const holder = await lockLaneTable()
    try {
      await relay.start()
      await waitForLockWaiters(t.db)
      const stopped = relay.stop({ timeoutMs: 5000 })
      await holder.commit().execute()
      await stopped
      // The application may close its pool now: nothing of the relay's may still be on its way.
      expect(await leasedLanes('giveback-')).toBe(0)
      expect(sink.requests).toHaveLength(0)
    } finally {
      await holder
        .rollback()
        .execute()
        .catch(() => {})
      await sql`DROP TRIGGER slow_release ON outbox_lane`.execute(t.db)
      await sql`DROP FUNCTION slow_release()`.execute(t.db)
      await sink.close()
    }
  })
})
