import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type SequencePolicy } from '../src/index.js'
import {
  appWith,
  createEffects,
  cursorOf,
  delivery,
  listen,
  makeEvent,
  post,
  quiet,
  recorded,
  recordingLogger,
  sleep,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
let db: Kysely<any>

interface Run {
  readonly sequence: number
  readonly aggregateId: string
  readonly startedAt: number
  readonly endedAt: number
}

/** A consumer whose handler takes `handlerMs`, records when each run started and ended, and tracks overlap. */
async function slowConsumer(policy: SequencePolicy, handlerMs: number) {
  const runs: Run[] = []
  let active = 0
  let maxActive = 0
  const started: ((sequence: number) => void)[] = []
  const { dedupe } = createConsumer({ db, allowUnsigned: true, logger: quiet, sequence: policy })
  const server = await listen(
    appWith(
      dedupe(async (event, trx) => {
        const startedAt = performance.now()
        active++
        maxActive = Math.max(maxActive, active)
        for (const notify of started) notify(event.sequence)
        await sleep(handlerMs)
        await writeEffect(trx, event)
        active--
        runs.push({
          sequence: event.sequence,
          aggregateId: event.aggregateId,
          startedAt,
          endedAt: performance.now(),
        })
      }),
    ),
  )
  const handlerStarted = (sequence: number) =>
    new Promise<void>((resolve) => started.push((s) => s === sequence && resolve()))
  return { server, runs, maxActive: () => maxActive, handlerStarted }
}

/** Resolves once `count` sessions of this test file's database wait for a lock (throws after 10 s). */
async function waitersOnLocks(count = 1): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
    const { rows } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(db)
    if (Number(rows[0]?.n) >= count) return
  }
  throw new Error(`fewer than ${count} sessions ever waited for a lock`)
}

const send = (url: string, event: OutboxEvent<unknown>) => {
  const { body, headers } = delivery(event)
  return post(url, body, headers)
}

beforeAll(async () => {
  db = t.connect({ max: 20 })
  await createEffects(db)
})

describe('dedupe: events of one aggregate are applied one after the other', () => {
  const servers: { close: () => Promise<void> }[] = []
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.close()))
  })

  // A new aggregate's first events serialize on creating its cursor row; later ones only on `FOR UPDATE`. Both.
  for (const history of ['a new aggregate', 'an aggregate with a cursor'] as const) {
    const base = history === 'a new aggregate' ? 0 : 1

    it(`two events posted at the same moment never overlap, and the cursor ends at the higher one (${history})`, async () => {
      const consumer = await slowConsumer('monotonic', 200)
      servers.push(consumer.server)
      const aggregateId = `same-moment-${base}`
      if (base > 0)
        expect((await send(consumer.server.url, makeEvent({ aggregateId, sequence: base }))).status).toBe(200)
      const lower = makeEvent({ aggregateId, sequence: base + 1 })
      const higher = makeEvent({ aggregateId, sequence: base + 2 })
      const runsBefore = consumer.runs.length

      const answers = await Promise.all([send(consumer.server.url, lower), send(consumer.server.url, higher)])

      expect(answers.map((answer) => answer.status)).toEqual([200, 200])
      expect(consumer.maxActive()).toBe(1)
      expect(await cursorOf(db, 'order', aggregateId)).toBe(base + 2)
      const runs = consumer.runs.slice(runsBefore)
      // Whichever won the cursor lock, the other ran after it ended — or, if the higher ran first, the lower was
      // stale and skipped.
      if (runs.length === 2) {
        expect(runs[1]!.startedAt).toBeGreaterThanOrEqual(runs[0]!.endedAt)
        expect(answers.map((answer) => answer.json.status)).toEqual(['applied', 'applied'])
      } else {
        expect(runs.map((run) => run.sequence)).toEqual([base + 2])
        expect(answers.map((answer) => answer.json.status)).toEqual(['stale_ignored', 'applied'])
      }
    })

    it(`a later event arriving while the earlier one is in its handler waits, then applies (${history})`, async () => {
      const consumer = await slowConsumer('strict', 300)
      servers.push(consumer.server)
      const aggregateId = `waits-${base}`
      if (base > 0)
        expect((await send(consumer.server.url, makeEvent({ aggregateId, sequence: base }))).status).toBe(200)
      const earlier = makeEvent({ aggregateId, sequence: base + 1 })
      const later = makeEvent({ aggregateId, sequence: base + 2 })
      const runsBefore = consumer.runs.length

      const earlierStarted = consumer.handlerStarted(base + 1)
      const first = send(consumer.server.url, earlier)
      await earlierStarted
      const second = send(consumer.server.url, later)
      const answers = await Promise.all([first, second])

      // Under 'strict' a later event that did not wait would have read the old cursor and answered 409.
      expect(answers.map((answer) => [answer.status, answer.json.status])).toEqual([
        [200, 'applied'],
        [200, 'applied'],
      ])
      const runs = consumer.runs.slice(runsBefore)
      expect(runs.map((run) => run.sequence)).toEqual([base + 1, base + 2])
      expect(runs[1]!.startedAt).toBeGreaterThanOrEqual(runs[0]!.endedAt)
      expect(await cursorOf(db, 'order', aggregateId)).toBe(base + 2)
    })
  }

  it('different aggregates are not serialized: their handlers overlap', async () => {
    const consumer = await slowConsumer('strict', 300)
    servers.push(consumer.server)
    const events = ['par-a', 'par-b', 'par-c'].map((aggregateId) => makeEvent({ aggregateId, sequence: 1 }))

    const answers = await Promise.all(events.map((event) => send(consumer.server.url, event)))

    expect(answers.every((answer) => answer.json?.status === 'applied')).toBe(true)
    expect(consumer.maxActive()).toBe(3)
  })

  it('the cursor never moves back: an older event arriving after a newer one is stale', async () => {
    const consumer = await slowConsumer('monotonic', 0)
    servers.push(consumer.server)
    const five = makeEvent({ aggregateId: 'no-back', sequence: 5 })
    const three = makeEvent({ aggregateId: 'no-back', sequence: 3 })

    expect((await send(consumer.server.url, five)).json.status).toBe('applied')
    expect((await send(consumer.server.url, three)).json.status).toBe('stale_ignored')
    expect(await cursorOf(db, 'order', 'no-back')).toBe(5)
    expect(consumer.runs.map((run) => run.sequence)).toEqual([5])
  })
})

// One statement records the id and takes, creates or advances the cursor (sql/record-event.ts). These pin down the
// paths that shape must keep: a duplicate stays off the cursor lock, a waiter judges what the holder committed,
// and a waiter on a new aggregate whose creator rolls back creates the cursor itself.
describe('dedupe: recording the id and taking the cursor in one statement', () => {
  const servers: { close: () => Promise<void> }[] = []
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.close()))
  })

  /** A consumer whose handler, for the sequences in `hold`, signals its start and waits for `release`. */
  async function gatedConsumer(policy: SequencePolicy, options: { failFirstOf?: number } = {}) {
    const logger = recordingLogger()
    const ran: number[] = []
    const gates = new Map<number, { started: () => void; release: Promise<void> }>()
    const failed = new Set<number>()
    const { dedupe } = createConsumer({ db, allowUnsigned: true, logger, sequence: policy })
    const server = await listen(
      appWith(
        dedupe(async (event, trx) => {
          ran.push(event.sequence)
          await writeEffect(trx, event)
          const gate = gates.get(event.sequence)
          if (gate !== undefined) {
            gates.delete(event.sequence)
            gate.started()
            await gate.release
          }
          if (event.sequence === options.failFirstOf && !failed.has(event.sequence)) {
            failed.add(event.sequence)
            throw new Error('the first attempt fails after holding the cursor')
          }
        }),
      ),
    )
    servers.push(server)
    /** The next run of `sequence` stops in its handler; resolves once it is there, with the function that frees it. */
    const hold = (sequence: number) => {
      let release!: () => void
      const released = new Promise<void>((resolve) => {
        release = resolve
      })
      const started = new Promise<() => void>((resolve) => {
        gates.set(sequence, { started: () => resolve(release), release: released })
      })
      return started
    }
    return { url: server.url, ran, logger, hold }
  }

  it('answers a duplicate at once while another event of its aggregate holds the cursor', async () => {
    const consumer = await gatedConsumer('monotonic')
    const one = makeEvent({ aggregateId: 'dup-off-lock', sequence: 1 })
    const two = makeEvent({ aggregateId: 'dup-off-lock', sequence: 2 })
    expect((await send(consumer.url, one)).json.status).toBe('applied')

    const twoInHandler = consumer.hold(2)
    const twoAnswer = send(consumer.url, two)
    const releaseTwo = await twoInHandler // two holds the aggregate's cursor row until it commits
    let twoDone = false
    void twoAnswer.then(() => {
      twoDone = true
    })

    // Had the duplicate touched the cursor, it would wait for two's commit, which only comes after release.
    const again = await Promise.race([
      send(consumer.url, one),
      sleep(5_000).then(() => 'still waiting after 5 s' as const),
    ])
    const twoDoneBefore = twoDone
    releaseTwo()

    expect(typeof again === 'string' ? again : again.json.status).toBe('duplicate_ignored')
    expect(twoDoneBefore).toBe(false)
    expect((await twoAnswer).json.status).toBe('applied')
    expect(consumer.ran).toEqual([1, 2])
  })

  it('an older event that waited for the cursor is judged against what the holder committed: stale', async () => {
    const consumer = await gatedConsumer('monotonic')
    const three = makeEvent({ aggregateId: 'stale-after-wait', sequence: 3 })
    const two = makeEvent({ aggregateId: 'stale-after-wait', sequence: 2 })

    const threeInHandler = consumer.hold(3)
    const threeAnswer = send(consumer.url, three)
    const releaseThree = await threeInHandler
    const twoAnswer = send(consumer.url, two)
    await waitersOnLocks().finally(releaseThree) // two is blocked on the cursor row three holds

    expect((await threeAnswer).json.status).toBe('applied')
    expect((await twoAnswer).json).toEqual({ status: 'stale_ignored', eventId: two.eventId })
    expect(consumer.ran).toEqual([3])
    expect(await recorded(db, two)).toEqual({ processed: 1, effects: 0, cursor: 3 })
    const line = consumer.logger.lines.find((entry) => entry.meta?.eventId === two.eventId)
    expect(line?.meta).toMatchObject({ status: 'stale_ignored', cursor: 3 })
  })

  for (const policy of ['monotonic', 'strict'] as const) {
    it(`a new aggregate's first event rolls back while another first event waits: the waiter creates the cursor (${policy})`, async () => {
      const consumer = await gatedConsumer(policy, { failFirstOf: 1 })
      const aggregateId = `creator-rolls-back-${policy}`
      const one = makeEvent({ aggregateId, sequence: 1 })
      const two = makeEvent({ aggregateId, sequence: 2 })

      const oneInHandler = consumer.hold(1)
      const oneAnswer = send(consumer.url, one)
      const releaseOne = await oneInHandler // one created the cursor row, uncommitted
      const twoAnswer = send(consumer.url, two)
      // two is blocked on that row's primary key; then one throws, its row is rolled back and two inserts its own
      await waitersOnLocks().finally(releaseOne)

      expect((await oneAnswer).status).toBe(500)
      const answered = await twoAnswer
      if (policy === 'monotonic') {
        expect(answered.json.status).toBe('applied')
        expect(await recorded(db, two)).toEqual({ processed: 1, effects: 1, cursor: 2 })
        // the retry of one arrives after two: stale, as monotonic says
        expect((await send(consumer.url, one)).json.status).toBe('stale_ignored')
        expect(consumer.ran).toEqual([1, 2])
      } else {
        // strict: two found no cursor, so it was the aggregate's first event and not sequence 1 — a gap, all rolled back
        expect(answered.status).toBe(409)
        expect(answered.json).toMatchObject({ code: 'sequence_gap', expected: 1, received: 2 })
        expect(await recorded(db, two)).toEqual({ processed: 0, effects: 0, cursor: undefined })
        expect((await send(consumer.url, one)).json.status).toBe('applied')
        expect((await send(consumer.url, two)).json.status).toBe('applied')
        expect(consumer.ran).toEqual([1, 1, 2])
      }
      expect(await cursorOf(db, 'order', aggregateId)).toBe(2)
    })
  }
})
