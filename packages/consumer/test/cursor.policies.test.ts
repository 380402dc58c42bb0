import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import fc from 'fast-check'
import request from 'supertest'
import { beforeAll, describe, expect, it } from 'vitest'
import { initialCursor, judgeSequence } from '../src/cursor.js'
import { type ConsumerOptions, createConsumer } from '../src/index.js'
import { prepareRecordEvent } from '../src/sql/record-event.js'
import {
  appWith,
  createEffects,
  cursorOf,
  delivery,
  makeEvent,
  quiet,
  recorded,
  writeEffect,
} from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
})

/** A consumer app plus the order in which its handler saw sequences. */
function consumerApp(options: Omit<ConsumerOptions, 'db'>) {
  const applied: string[] = []
  const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, ...options })
  const app = appWith(
    dedupe(async (event, trx) => {
      applied.push(`${event.aggregateType}:${event.aggregateId}#${event.sequence}`)
      await writeEffect(trx, event)
    }),
  )
  const send = async (event: OutboxEvent<unknown>) => {
    const { body, headers } = delivery(event)
    return await request(app).post('/hooks').set(headers).send(body)
  }
  return { applied, send }
}

const seq = (aggregateId: string, sequence: number, aggregateType = 'order') =>
  makeEvent({ aggregateType, aggregateId, sequence })

describe("sequence: 'monotonic' (default)", () => {
  it('applies newer events (gaps allowed), records an older unseen one as stale without running the handler', async () => {
    const { applied, send } = consumerApp({})
    const one = seq('m-1', 1)
    const three = seq('m-1', 3)
    const two = seq('m-1', 2)

    expect((await send(one)).body.status).toBe('applied')
    expect((await send(three)).body.status).toBe('applied')
    const stale = await send(two)
    expect(stale.status).toBe(200)
    expect(stale.body).toEqual({ status: 'stale_ignored', eventId: two.eventId })
    // recorded, so a redelivery of the stale event is a plain duplicate
    expect(await recorded(t.db, two)).toEqual({ processed: 1, effects: 0, cursor: 3 })
    expect((await send(two)).body.status).toBe('duplicate_ignored')
    expect(applied).toEqual(['order:m-1#1', 'order:m-1#3'])
  })
})

describe("sequence: 'strict'", () => {
  it('answers 409 for a gap, records nothing, and applies in order once the missing event arrives', async () => {
    const { applied, send } = consumerApp({ sequence: 'strict' })
    const [one, two, three] = [seq('s-1', 1), seq('s-1', 2), seq('s-1', 3)] as const

    expect((await send(one)).body.status).toBe('applied')
    const gap = await send(three)
    expect(gap.status).toBe(409)
    expect(gap.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(gap.body).toMatchObject({ code: 'sequence_gap', status: 409, expected: 2, received: 3 })
    expect(await recorded(t.db, three)).toEqual({ processed: 0, effects: 0, cursor: 1 })

    expect((await send(two)).body.status).toBe('applied')
    expect((await send(three)).body.status).toBe('applied') // the relay's retry heals the gap
    expect(applied).toEqual(['order:s-1#1', 'order:s-1#2', 'order:s-1#3'])
    expect(await cursorOf(t.db, 'order', 's-1')).toBe(3)
  })

  it('records an unseen event at or below the cursor as stale_ignored', async () => {
    const { applied, send } = consumerApp({ sequence: 'strict' })
    await send(seq('s-2', 1))
    await send(seq('s-2', 2))
    const replayedTwo = seq('s-2', 2) // a different id with an old sequence
    const oldOne = seq('s-2', 1)
    expect((await send(replayedTwo)).body.status).toBe('stale_ignored')
    expect((await send(oldOne)).body.status).toBe('stale_ignored')
    expect(await recorded(t.db, oldOne)).toEqual({ processed: 1, effects: 0, cursor: 2 })
    expect(applied).toEqual(['order:s-2#1', 'order:s-2#2'])
  })

  it('with firstSequence 1 (default), an aggregate must start at sequence 1', async () => {
    const { applied, send } = consumerApp({ sequence: 'strict' })
    const five = seq('s-first-1', 5)
    const answer = await send(five)
    expect(answer.status).toBe(409)
    expect(answer.body).toMatchObject({ code: 'sequence_gap', expected: 1, received: 5 })
    // not even the cursor row survives the rollback
    expect(await recorded(t.db, five)).toEqual({ processed: 0, effects: 0, cursor: undefined })
    expect(applied).toEqual([])
    expect((await send(seq('s-first-1', 1))).body.status).toBe('applied')
  })

  it("with firstSequence 'any', a subscriber joining mid-stream starts at the first event it gets", async () => {
    const { applied, send } = consumerApp({ sequence: 'strict', firstSequence: 'any' })
    expect((await send(seq('s-any', 7))).body.status).toBe('applied')
    const nine = seq('s-any', 9)
    expect((await send(nine)).body).toMatchObject({ code: 'sequence_gap', expected: 8, received: 9 })
    expect((await send(seq('s-any', 8))).body.status).toBe('applied')
    expect((await send(nine)).body.status).toBe('applied')
    expect((await send(seq('s-any', 5))).body.status).toBe('stale_ignored')
    expect(applied).toEqual(['order:s-any#7', 'order:s-any#8', 'order:s-any#9'])
    expect(await cursorOf(t.db, 'order', 's-any')).toBe(9)
  })
})

describe("sequence: 'off'", () => {
  it('dedupes only: every unseen event applies in any order and no cursor is kept', async () => {
    const { applied, send } = consumerApp({ sequence: 'off' })
    const three = seq('off-1', 3)
    for (const event of [three, seq('off-1', 1), seq('off-1', 2)]) {
      expect((await send(event)).body.status).toBe('applied')
    }
    expect((await send(three)).body.status).toBe('duplicate_ignored')
    expect(applied).toEqual(['order:off-1#3', 'order:off-1#1', 'order:off-1#2'])
    expect(await cursorOf(t.db, 'order', 'off-1')).toBeUndefined()
  })
})

describe('the aggregate key is the pair (aggregate_type, aggregate_id)', () => {
  it("keeps order:42 and customer:42 apart under 'strict'", async () => {
    const { applied, send } = consumerApp({ sequence: 'strict' })
    expect((await send(seq('pair-42', 1, 'order'))).body.status).toBe('applied')
    expect((await send(seq('pair-42', 2, 'order'))).body.status).toBe('applied')
    // customer:42 starts its own history: 1 is expected, not 3
    expect((await send(seq('pair-42', 1, 'customer'))).body.status).toBe('applied')
    expect((await send(seq('pair-42', 3, 'customer'))).body).toMatchObject({
      code: 'sequence_gap',
      expected: 2,
    })
    expect(applied).toEqual(['order:pair-42#1', 'order:pair-42#2', 'customer:pair-42#1'])
    expect(await cursorOf(t.db, 'order', 'pair-42')).toBe(2)
    expect(await cursorOf(t.db, 'customer', 'pair-42')).toBe(1)
  })

  it("keeps order:42 and customer:42 apart under 'monotonic'", async () => {
    const { send } = consumerApp({})
    expect((await send(seq('mono-42', 5, 'order'))).body.status).toBe('applied')
    expect((await send(seq('mono-42', 1, 'customer'))).body.status).toBe('applied')
    expect(await cursorOf(t.db, 'order', 'mono-42')).toBe(5)
    expect(await cursorOf(t.db, 'customer', 'mono-42')).toBe(1)
  })
})

describe('judgeSequence (the policy table)', () => {
  const positive = fc.integer({ min: 1, max: 1_000_000 })
  const cursor = fc.integer({ min: 0, max: 1_000_000 })

  it("'monotonic' applies exactly the sequences above the cursor", () => {
    fc.assert(
      fc.property(cursor, positive, (c, s) => {
        expect(judgeSequence('monotonic', 1, c, s).kind).toBe(s > c ? 'apply' : 'stale')
      }),
    )
  })

  it("'strict' applies exactly cursor + 1 (or anything first under 'any'), answers a gap above, stale at or below", () => {
    fc.assert(
      fc.property(cursor, positive, fc.constantFrom(1 as const, 'any' as const), (c, s, first) => {
        const verdict = judgeSequence('strict', first, c, s)
        if (c === 0 && first === 'any') expect(verdict.kind).toBe('apply')
        else if (s === c + 1) expect(verdict.kind).toBe('apply')
        else if (s <= c) expect(verdict.kind).toBe('stale')
        else expect(verdict).toEqual({ kind: 'gap', expected: c + 1 })
      }),
    )
  })

  it("'off' always applies", () => {
    fc.assert(fc.property(cursor, positive, (c, s) => judgeSequence('off', 1, c, s).kind === 'apply'))
  })

  // recordEvent asks "apply?" inside the outbox_record_event function, where the cursor is locked; judgeSequence
  // must stay the policy it implements. The function itself runs here, on cursor rows set to each case.
  it('outbox_record_event advances the cursor exactly when judgeSequence says apply, in PostgreSQL', async () => {
    const sequence = fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER })
    // Half the cases sit around the cursor (c - 2 … c + 3), where the policies differ; bigint range included.
    const pair = fc.oneof(
      fc.tuple(cursor, positive),
      fc.tuple(sequence, fc.integer({ min: -2, max: 3 })).map(([c, d]) => [c, Math.max(1, c + d)] as const),
      fc.tuple(fc.constant(0), fc.integer({ min: 1, max: 3 })),
    )
    const setting = fc.constantFrom(
      ['monotonic', 1] as const,
      ['strict', 1] as const,
      ['strict', 'any'] as const,
    )
    // At 0 the aggregate may be new (no cursor row yet) or hold a row at 0; above 0 it always has its row.
    const newAggregate = fc.boolean()
    let run = 0
    let applied = 0
    await fc.assert(
      fc.asyncProperty(setting, pair, newAggregate, async ([policy, first], [c, s], isNew) => {
        const aggregateId = `property-${run++}`
        if (c > 0 || !isNew) {
          await t.db
            .insertInto('consumer_cursors')
            .values({ aggregate_type: 'property', aggregate_id: aggregateId, last_sequence: c })
            .execute()
        }
        const recordEvent = prepareRecordEvent(t.db, {
          schema: undefined,
          source: 'default',
          policy,
          firstSequence: first,
        })
        const event = makeEvent({ aggregateType: 'property', aggregateId, sequence: s })
        const result = await recordEvent(t.db, event, initialCursor(policy, first, s), 'digest')

        const applies = judgeSequence(policy, first, c, s).kind === 'apply'
        if (applies) applied++
        expect(result).toBe(applies ? 'advanced' : 'held')
        expect(await cursorOf(t.db, 'property', aggregateId)).toBe(applies ? s : c)
      }),
      { numRuns: 300 },
    )
    expect(applied).toBeGreaterThan(30) // both answers were really exercised
  })

  it('outbox_record_event refuses a policy it does not know instead of judging with it', async () => {
    const recordEvent = prepareRecordEvent(t.db, {
      schema: undefined,
      source: 'default',
      policy: 'sideways' as 'strict',
      firstSequence: 1,
    })
    const event = makeEvent({ aggregateId: 'unknown-policy' })
    await expect(recordEvent(t.db, event, 0, 'digest')).rejects.toMatchObject({ code: '22023' })
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })
})
