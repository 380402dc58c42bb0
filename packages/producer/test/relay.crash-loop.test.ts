import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { stats } from '../src/index.js'
import { type RelayProcess, spawnRelay } from './relay-process.js'
import { deferred, expectLanesLive, seedEvents, sleep, waitFor } from './support.js'

const t = useTestDatabase()

/**
 * How many times the crash loop runs (`OUTBOX_CRASH_REPEAT=20` for a soak): each run is a fresh outbox, a new
 * relay process after every kill, and the poison's arrival kills at once, so every run meets the window afresh.
 */
const repeat = Math.max(1, Number(process.env.OUTBOX_CRASH_REPEAT ?? 1))

const INNOCENT_LANES = 40
const EVENTS_PER_INNOCENT = 2
const OPTIONS = {
  concurrency: 4,
  batchSize: 10,
  leaseMs: 600,
  requestTimeoutMs: 200,
  pollIntervalMs: 20,
  // maxAttempts = 4.
  retrySchedule: [5, 5, 5],
}

/** The poison: the second event of lane `killer`. The first is innocent, and goes just before it in the same lane. */
function isPoison(envelope: { aggregate_id: string; sequence: number }): boolean {
  return envelope.aggregate_id === 'killer' && envelope.sequence === 2
}

const processes: RelayProcess[] = []
let sink: Sink | undefined

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

afterEach(async () => {
  await Promise.all(processes.splice(0).map((relay) => relay.kill()))
  await sink?.close()
  sink = undefined
  await expectLanesLive(t.db)
})

/** Counts of a finished run, for the assertions and the log line. */
interface CrashLoopRun {
  readonly kills: number
  /**
   * Innocent events the subscriber received more than once: a 2xx whose mark died with its relay, or a request cut
   * beside the poison's — the window this test is about.
   */
  readonly innocentsResent: number
}

/**
 * One relay process at a time, started again each time one dies, until nothing is pending. Every innocent request
 * is answered 2xx within a few milliseconds; the poison's arrival SIGKILLs the relay that sent it on the spot — no
 * waiting for marks, so 2xx answers that reached it just before are often not yet recorded, and requests beside the
 * poison's are cut mid-flight. Lanes charged at the same takeover are due again together, so the same innocent
 * lanes tend to go beside the poison crash after crash: the case that dead-lettered innocent events.
 */
async function crashLoop(): Promise<CrashLoopRun> {
  let current: RelayProcess | undefined
  let kills = 0
  let started = deferred()
  sink = await startSink(async (request) => {
    await started.promise
    if (!isPoison(request.json)) {
      await sleep(Math.floor(Math.random() * 10))
      return { status: 200, body: { status: 'applied' } }
    }
    kills += 1
    // The kill signal goes now; its exit is awaited by the supervisor below.
    void current?.kill()
    return 'hang'
  })
  const spawnOne = async () => {
    started = deferred()
    current = await spawnRelay(t.url, { ...OPTIONS, endpoint: sink!.url })
    processes.push(current)
    started.resolve()
  }
  await spawnOne()
  await waitFor(
    async () => {
      if (current?.child.exitCode !== null || current?.child.signalCode !== null) await spawnOne()
      return (await stats(t.db)).pending === 0
    },
    'the poison to be dead-lettered and every innocent event delivered',
    150_000,
  )
  const received = new Map<string, number>()
  for (const request of sink.requests) {
    if (isPoison(request.json)) continue
    received.set(request.json.event_id, (received.get(request.json.event_id) ?? 0) + 1)
  }
  return { kills, innocentsResent: [...received.values()].filter((count) => count > 1).length }
}

const runs: CrashLoopRun[] = []

describe('a crash loop: one event kills every relay that sends it, the moment it arrives (real processes, SIGKILL)', () => {
  for (let run = 1; run <= repeat; run++) {
    it(`only the poison is dead-lettered, after its attempts; every innocent event beside it is delivered (run ${run} of ${repeat})`, {
      timeout: 180_000,
    }, async () => {
      // The poison's lane first: it is the oldest due lane, so every relay sends it in its first wave, beside the
      // innocent lanes claimed with it. Its first event is innocent: answered 2xx just before the poison goes, its
      // mark still buffered when the poison kills the relay — the lost mark, charged at every takeover.
      await seedEvents(t.db, ['killer'], 2)
      const innocents = Array.from({ length: INNOCENT_LANES }, (_, n) => `innocent-${n}`)
      await seedEvents(t.db, innocents, EVENTS_PER_INNOCENT)

      const result = await crashLoop()
      runs.push(result)
      console.log(`[crash loop] run ${run}/${repeat}: ${JSON.stringify(result)}`)

      const rows = await t.db
        .selectFrom('outbox')
        .select(['aggregate_id', 'sequence', 'status', 'attempts', 'last_error'])
        .orderBy('aggregate_id')
        .orderBy('sequence')
        .execute()
      const dead = rows.filter((row) => row.status === 'dead')
      expect(dead.map((row) => [row.aggregate_id, Number(row.sequence)])).toEqual([['killer', 2]])
      // maxAttempts = 4 attempts, each proven: a relay died while the poison was the only request it had started.
      expect(dead[0]!.attempts).toBe(4)
      expect(dead[0]!.last_error).toMatch(/request was under way/)
      const innocentRows = rows.filter((row) => !isPoison({ ...row, sequence: Number(row.sequence) }))
      expect(innocentRows).toHaveLength(INNOCENT_LANES * EVENTS_PER_INNOCENT + 1)
      expect(innocentRows.filter((row) => row.status !== 'sent')).toEqual([])
    })
  }

  // Every kill cuts the requests beside the poison and loses the marks buffered with it (the innocent event just
  // before the poison, in its lane, every time): a run that resent no innocent event never met the window.
  it('the runs met the window: innocent requests were lost or cut with their relay and sent again', () => {
    expect(runs).toHaveLength(repeat)
    expect(runs.some((run) => run.innocentsResent > 0)).toBe(true)
  })
})
