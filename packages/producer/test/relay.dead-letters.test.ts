import { startSink, useTestDatabase } from '@outbox/test-harness'
import { afterEach, describe, expect, it } from 'vitest'
import { listDeadLetters, Relay, redrive, silentLogger, stats } from '../src/index.js'
import { expectLanesLive, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

/** A sink that refuses the events whose ids are in `poison`, and records the rest. */
async function poisonSink(poison: Set<string>) {
  return await startSink((request) =>
    poison.has(request.json.event_id)
      ? { status: 422, body: { error: 'cannot process' } }
      : { status: 200, body: { status: 'applied' } },
  )
}

async function laneEvents(id: string) {
  return await t.db
    .selectFrom('outbox')
    .selectAll()
    .where('aggregate_id', '=', id)
    .orderBy('sequence')
    .execute()
}

describe('dead letters', () => {
  it("'skip' dead-letters a poison event and the rest of its lane still arrives", async () => {
    await seedEvents(t.db, ['skip-1'], 3)
    const [, poisonRow] = await laneEvents('skip-1')
    const sink = await poisonSink(new Set([poisonRow!.event_id]))
    const deadEvents: string[] = []
    try {
      const relay = new Relay({ db: t.db, endpoint: sink.url, retrySchedule: [0, 0], logger: silentLogger })
      relay.on('delivery:dead', (event) => deadEvents.push(event.eventId))
      for (let i = 0; i < 6; i++) await relay.runOnce()
      const rows = await laneEvents('skip-1')
      expect(rows.map((row) => row.status)).toEqual(['sent', 'dead', 'sent'])
      expect(rows[1]).toMatchObject({ attempts: 3, last_status: 422 })
      expect(deadEvents).toEqual([poisonRow!.event_id])
      const [dead] = await listDeadLetters(t.db)
      expect(dead).toMatchObject({ eventId: poisonRow!.event_id, sequence: 2, attempts: 3, lastStatus: 422 })
      expect(dead!.lastError).toContain('cannot process')
      expect(await stats(t.db)).toMatchObject({ dead: 1, blocked: 0, pending: 0 })
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 2, 2, 3])
    } finally {
      await sink.close()
    }
  })

  it('a running relay retries at once when the schedule says 0 ms and moves past a dead letter without waiting for a poll', async () => {
    await seedEvents(t.db, ['skip-2'], 3)
    const [, poisonRow] = await laneEvents('skip-2')
    const sink = await poisonSink(new Set([poisonRow!.event_id]))
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: [0],
      pollIntervalMs: 600_000,
      listen: false,
      logger: silentLogger,
    })
    try {
      await relay.start()
      // Two attempts of the poison event, then the event behind it; a wait for the 10 min poll would time out.
      await waitFor(
        () => sink.requests.filter((request) => request.json.aggregate_id === 'skip-2').length === 4,
        'the retry and the event behind the dead letter',
        60_000,
      )
      expect(sink.requests.map((request) => request.json.sequence)).toEqual([1, 2, 2, 3])
    } finally {
      await relay.stop()
      await sink.close()
    }
  })

  it("'block' parks the lane behind the dead event; redrive resumes it in order with the same id and sequence", async () => {
    await seedEvents(t.db, ['block-1'], 3)
    const [, poisonRow] = await laneEvents('block-1')
    const poison = new Set([poisonRow!.event_id])
    const sink = await poisonSink(poison)
    const blocked: string[] = []
    try {
      const relay = new Relay({
        db: t.db,
        endpoint: sink.url,
        retrySchedule: [0],
        onExhausted: 'block',
        logger: silentLogger,
      })
      relay.on('lane:blocked', (lane) => blocked.push(`${lane.aggregateId}:${lane.reason}`))
      for (let i = 0; i < 5; i++) await relay.runOnce()
      expect((await laneEvents('block-1')).map((row) => row.status)).toEqual(['sent', 'dead', 'pending'])
      expect(blocked).toEqual(['block-1:exhausted'])
      expect(await stats(t.db)).toMatchObject({ blocked: 1 })
      const before = sink.requests.length

      poison.clear()
      expect(await redrive(t.db, { eventIds: [poisonRow!.event_id] })).toEqual({
        redriven: [poisonRow!.event_id],
        notDead: [],
        deliveries: [
          { eventId: poisonRow!.event_id, subscriptionId: '00000000-0000-0000-0000-000000000000' },
        ],
        dryRun: false,
      })
      expect(await stats(t.db)).toMatchObject({ blocked: 0 })
      await relay.runOnce()
      const after = sink.requests
        .slice(before)
        .map((request) => [request.json.sequence, request.json.event_id])
      expect(after).toEqual([
        [2, poisonRow!.event_id],
        [3, (await laneEvents('block-1'))[2]!.event_id],
      ])
      expect((await laneEvents('block-1')).map((row) => [row.status, row.attempts])).toEqual([
        ['sent', 1],
        ['sent', 1],
        ['sent', 1],
      ])
    } finally {
      await sink.close()
    }
  })

  it('a redrive while the lane is being delivered never puts two requests of that lane in flight', async () => {
    await seedEvents(t.db, ['busy-1'], 1)
    const [first] = await laneEvents('busy-1')
    const poison = new Set([first!.event_id])
    let maxInFlight = 0
    const sink = await startSink(async (request) => {
      maxInFlight = Math.max(maxInFlight, sink.inFlight.get('order:busy-1') ?? 0)
      await new Promise((resolve) => setTimeout(resolve, 15))
      return poison.has(request.json.event_id)
        ? { status: 500 }
        : { status: 200, body: { status: 'applied' } }
    })
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      retrySchedule: [],
      batchSize: 50,
      pollIntervalMs: 10,
      logger: silentLogger,
    })
    try {
      await relay.runOnce()
      expect((await laneEvents('busy-1'))[0]!.status).toBe('dead')
      poison.clear()
      await seedEvents(t.db, ['busy-1'], 30)
      await relay.start()
      await waitFor(() => sink.requests.length >= 5, 'the lane to be in flight')
      // Redrive the lane's dead head while the relay is in the middle of the lane, several times over.
      for (let i = 0; i < 3; i++) await redrive(t.db, { eventIds: [first!.event_id] })
      await waitFor(
        async () => (await laneEvents('busy-1')).every((row) => row.status === 'sent'),
        'the lane to drain',
      )
    } finally {
      await relay.stop()
      await sink.close()
    }
    expect(maxInFlight).toBe(1)
    expect(
      sink.requests.filter((request) => request.json.event_id === first!.event_id).length,
    ).toBeGreaterThanOrEqual(2)
  })

  it('redrive reports ids that are not dead letters and refuses malformed ids', async () => {
    await seedEvents(t.db, ['nd-1'], 1)
    const [row] = await laneEvents('nd-1')
    expect(await redrive(t.db, { eventIds: [row!.event_id] })).toEqual({
      redriven: [],
      notDead: [row!.event_id],
      deliveries: [],
      dryRun: false,
    })
    await expect(redrive(t.db, { eventIds: ['nope'] })).rejects.toThrow(/UUID/)
  })
})
