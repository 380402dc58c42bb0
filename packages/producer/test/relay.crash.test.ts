import { type SinkRequest, startSink, useTestDatabase } from '@outbox/test-harness'
import { afterEach, describe, expect, it } from 'vitest'
import { type RelayOptions, stats } from '../src/index.js'
import { type RelayProcess, spawnRelay } from './relay-process.js'
import { deferred, expectLanesLive, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})
const processes: RelayProcess[] = []

afterEach(async () => {
  await Promise.all(processes.splice(0).map((relay) => relay.kill()))
})

/**
 * Waits until every answered event is recorded as sent: the relay's marks of its 2xx have landed. The ceiling is
 * generous (a loaded machine delays the marks, it does not lose them); past it the kill goes ahead and the count of
 * kills tells.
 */
async function marksLanded(answered: ReadonlyMap<string, number>): Promise<void> {
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    const rows = await t.db
      .selectFrom('outbox')
      .select(['aggregate_id', 'sequence'])
      .where('status', '=', 'pending')
      .where('aggregate_id', 'in', [...answered.keys(), ''])
      .execute()
    if (rows.every((row) => Number(row.sequence) > answered.get(row.aggregate_id)!)) return
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/**
 * A sink whose poison requests kill the relay that sent them, and a supervisor that starts a new relay process each
 * time one dies — until `done` holds. Returns how many relays the poison killed.
 *
 * The kill waits until the 2xx answers given before the poison are recorded as sent. Marks are written just after
 * the answer, so a relay killed at once may die before an innocent lane it finished is recorded; the next owner
 * then sees a request started and never recorded, and charges it provisionally (relay.crash-loop.test.ts kills at
 * once). These tests count exactly what the poison's own takeovers charge, so they leave that window out.
 */
async function superviseThroughPoison(
  isPoison: (request: SinkRequest) => boolean,
  options: Omit<RelayOptions, 'db' | 'endpoint'>,
  done: () => Promise<boolean>,
  what: string,
): Promise<number> {
  let current: RelayProcess | undefined
  let kills = 0
  let started = deferred()
  // The highest sequence answered 2xx per aggregate.
  const answered = new Map<string, number>()
  const sink = await startSink(async (request) => {
    await started.promise
    if (!isPoison(request)) {
      const { aggregate_id: aggregateId, sequence } = request.json as {
        aggregate_id: string
        sequence: number
      }
      answered.set(aggregateId, Math.max(answered.get(aggregateId) ?? 0, sequence))
      return { status: 200, body: { status: 'applied' } }
    }
    kills += 1
    await marksLanded(answered)
    await current?.kill()
    return 'hang'
  })
  const spawnOne = async () => {
    started = deferred()
    current = await spawnRelay(t.url, { ...options, endpoint: sink.url })
    processes.push(current)
    started.resolve()
  }
  try {
    await spawnOne()
    await waitFor(
      async () => {
        if (current?.child.exitCode !== null || current?.child.signalCode !== null) await spawnOne()
        return await done()
      },
      what,
      // Generous: each kill costs a process start and a lease, and a loaded machine stretches both.
      270_000,
    )
    return kills
  } finally {
    await sink.close()
  }
}

/**
 * The poison tests' relay. Its request timeout outlasts the sink's kill (which first waits for earlier marks) on any
 * machine: a relay that gave up on the poison request itself would charge it an attempt without a crash, and the
 * kills would no longer count the takeovers. The lease is the least that allows that timeout.
 */
const POISON_OPTIONS = { leaseMs: 4000, requestTimeoutMs: 3000, pollIntervalMs: 20, retrySchedule: [5, 5] }

describe('relay crashes (real processes, SIGKILL)', () => {
  it('a crash between the POST and its mark-sent gives a duplicate with the same event id, never a loss', async () => {
    await seedEvents(t.db, ['crash-1'], 1)
    let first: RelayProcess | undefined
    const started = deferred()
    const sink = await startSink(async (request) => {
      await started.promise
      if (first && sink.requests.length === 1) {
        // The subscriber applies the event, then the relay dies before it can record the 2xx.
        await first.kill()
      }
      return { status: 200, body: { status: request === sink.requests[0] ? 'applied' : 'duplicate_ignored' } }
    })
    try {
      // The request timeout outlasts the kill however slow the machine: the relay must die mid-request, not give
      // up on the request first.
      const options = { endpoint: sink.url, leaseMs: 4000, requestTimeoutMs: 3000, pollIntervalMs: 20 }
      first = await spawnRelay(t.url, options)
      processes.push(first)
      started.resolve()
      await waitFor(() => sink.requests.length === 1, 'the first delivery')
      await first.kill()
      const row = await t.db.selectFrom('outbox').selectAll().executeTakeFirstOrThrow()
      expect(row.status).toBe('pending')

      processes.push(await spawnRelay(t.url, options))
      await waitFor(async () => (await stats(t.db)).pending === 0, 'the takeover to deliver')
      expect(sink.requests).toHaveLength(2)
      expect(sink.requests[1]!.json.event_id).toBe(sink.requests[0]!.json.event_id)
      expect(sink.requests[1]!.json.sequence).toBe(sink.requests[0]!.json.sequence)
      const sent = await t.db
        .selectFrom('outbox')
        .selectAll()
        .where('id', '=', row.id)
        .executeTakeFirstOrThrow()
      expect(sent).toMatchObject({ status: 'sent', delivery_status: 'duplicate_ignored' })
    } finally {
      await sink.close()
    }
  })

  it('an event that kills its relay every time is dead-lettered after maxAttempts takeovers proven alone; its lane moves on', {
    timeout: 300_000,
  }, async () => {
    await seedEvents(t.db, ['poison'], 2)
    const kills = await superviseThroughPoison(
      (request) => request.json.sequence === 1,
      POISON_OPTIONS,
      async () => {
        const { dead, pending } = await stats(t.db)
        return dead === 1 && pending === 0
      },
      'the poison event to be dead-lettered and the rest of its lane delivered',
    )
    const rows = await t.db
      .selectFrom('outbox')
      .selectAll()
      .where('aggregate_id', '=', 'poison')
      .orderBy('sequence')
      .execute()
    expect(rows.map((row) => [Number(row.sequence), row.status])).toEqual([
      [1, 'dead'],
      [2, 'sent'],
    ])
    // maxAttempts = retrySchedule.length + 1 = 3, each counted at a takeover that found its request under way ALONE.
    // The first takeover is free: the lane was not watched yet, so nothing said its request had started (a lane
    // only claimed ahead by the dead relay looks the same); from then on every owner records its start. The next
    // three charges are provisional (nothing says the poison, not a request beside it, killed the relay) and make it
    // suspect; the last three kills happen while it is its relay's only request, and prove it.
    expect(rows[0]!.attempts).toBe(3)
    expect(rows[0]!.takeover_charges).toBe(3)
    expect(kills).toBe(7)
    expect(rows[0]!.last_error).toMatch(/request was under way/)
  })

  it('lanes only claimed ahead by a relay that died are handed over free: innocent events are never charged for a poison one', {
    timeout: 300_000,
  }, async () => {
    // concurrency 1: each relay delivers the poison lane and keeps one innocent lane claimed ahead, unstarted, when
    // the poison kills it. Before the takeover rule, every crash charged that innocent head an attempt too.
    await seedEvents(t.db, ['killer'], 1)
    const innocents = Array.from({ length: 6 }, (_, n) => `innocent-${n}`)
    await seedEvents(t.db, innocents, 1)
    const kills = await superviseThroughPoison(
      (request) => request.json.aggregate_id === 'killer',
      { ...POISON_OPTIONS, concurrency: 1 },
      async () => (await stats(t.db)).pending === 0,
      'the poison to be dead-lettered and every innocent event delivered',
    )
    const rows = await t.db
      .selectFrom('outbox')
      .selectAll()
      .where('aggregate_id', 'in', ['killer', ...innocents])
      .orderBy('aggregate_id')
      .execute()
    expect(rows.filter((row) => row.status === 'dead').map((row) => row.aggregate_id)).toEqual(['killer'])
    const innocentRows = rows.filter((row) => row.aggregate_id !== 'killer')
    // Each innocent event was delivered and charged nothing for the crashes: no takeover charge, and no attempt
    // recorded as one (a request of its own that timed out on a loaded machine would be an honest attempt).
    expect(innocentRows.map((row) => row.status)).toEqual(innocents.map(() => 'sent'))
    expect(innocentRows.map((row) => row.takeover_charges)).toEqual(innocents.map(() => 0))
    for (const row of innocentRows) expect(row.last_error ?? '').not.toMatch(/request was under way/)
    expect(kills).toBe(7)
  })
})
