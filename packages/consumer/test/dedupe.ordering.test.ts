import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import type { Kysely } from 'kysely'
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
  const { dedupe } = createConsumer({ db, logger: quiet, sequence: policy })
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
