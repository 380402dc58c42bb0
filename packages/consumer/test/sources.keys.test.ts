import { randomUUID } from 'node:crypto'
import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  type ConsumerOptions,
  createConsumer,
  type EnvelopeReader,
  pruneProcessed,
  type SequencePolicy,
} from '../src/index.js'
import { createEffects, cursorOf, delivery, makeEvent, quiet, writeEffect } from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
  await sql`CREATE TABLE foreign_effects (event_id text NOT NULL, source text NOT NULL)`.execute(t.db)
})

/** A consumer on the shared database, driven through its framework-free core. */
function consumerOf(options: Omit<ConsumerOptions, 'db' | 'allowUnsigned' | 'logger'>) {
  const consumer = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, ...options })
  const seen: string[] = []
  const handle = consumer.handle(async (event, trx) => {
    seen.push(event.eventId)
    await writeEffect(trx, event as OutboxEvent<unknown>)
  })
  const send = async (event: OutboxEvent<unknown>, eventId = event.eventId) => {
    const { body, headers } = delivery(event)
    const answer = await handle({
      method: 'POST',
      headers: { ...headers, 'x-idempotency-key': eventId },
      body: new TextEncoder().encode(body.replace(event.eventId, eventId)),
    })
    return { status: answer.status, body: JSON.parse(answer.body) as { status?: string; code?: string } }
  }
  return { seen, send }
}

async function processedRows(eventId: string) {
  return await t.db
    .selectFrom('processed_events')
    .select(['source', 'event_id', 'aggregate_type', 'aggregate_id', 'sequence', 'type'])
    .where('event_id', '=', eventId)
    .orderBy('source')
    .execute()
}

describe('two consumers with different sources on one database', () => {
  it.each<SequencePolicy>(['monotonic', 'strict', 'off'])(
    "both apply an event reusing the same id and aggregate key, each dedupes its own redelivery (sequence: '%s')",
    async (sequence) => {
      const aggregateId = `shared-${sequence}`
      const relayA = consumerOf({ source: 'relay-a', sequence })
      const relayB = consumerOf({ source: 'relay-b', sequence })
      const first = makeEvent({ aggregateId, sequence: 1 })
      const second = makeEvent({ aggregateId, sequence: 2 })

      for (const event of [first, second]) {
        expect((await relayA.send(event)).body.status).toBe('applied')
        expect((await relayB.send(event)).body.status).toBe('applied')
      }
      expect((await relayA.send(second)).body.status).toBe('duplicate_ignored')
      expect((await relayB.send(first)).body.status).toBe('duplicate_ignored')

      expect(relayA.seen).toEqual([first.eventId, second.eventId])
      expect(relayB.seen).toEqual([first.eventId, second.eventId])
      expect((await processedRows(first.eventId)).map((row) => row.source)).toEqual(['relay-a', 'relay-b'])
      const cursors = await t.db
        .selectFrom('consumer_cursors')
        .select(['source', 'last_sequence'])
        .where('aggregate_id', '=', aggregateId)
        .orderBy('source')
        .execute()
      // Each source has its own cursor; under 'off' none is kept.
      expect(cursors).toEqual(
        sequence === 'off'
          ? []
          : [
              { source: 'relay-a', last_sequence: '2' },
              { source: 'relay-b', last_sequence: '2' },
            ],
      )
    },
  )

  it("one source's cursor does not judge another's events: an older sequence is stale for one, new for the other", async () => {
    const ahead = consumerOf({ source: 'ahead', sequence: 'strict' })
    const fresh = consumerOf({ source: 'fresh', sequence: 'strict' })
    const events = [1, 2, 3].map((sequence) => makeEvent({ aggregateId: 'judged-apart', sequence }))
    for (const event of events) expect((await ahead.send(event)).body.status).toBe('applied')

    // Under 'ahead' a new id with sequence 1 is stale; under 'fresh' the aggregate starts there.
    const restart = makeEvent({ aggregateId: 'judged-apart', sequence: 1 })
    expect((await ahead.send(restart)).body.status).toBe('stale_ignored')
    expect((await fresh.send(restart)).body.status).toBe('applied')
    // And a gap under 'fresh' is answered 409 whatever 'ahead' has applied.
    expect((await fresh.send(makeEvent({ aggregateId: 'judged-apart', sequence: 3 }))).status).toBe(409)
    expect(await cursorOf(t.db, 'order', 'judged-apart', undefined, 'ahead')).toBe(3)
    expect(await cursorOf(t.db, 'order', 'judged-apart', undefined, 'fresh')).toBe(1)
    expect(await cursorOf(t.db, 'order', 'judged-apart')).toBeUndefined() // nothing under 'default'
  })
})

/** A Stripe-shaped body: `{ id: 'evt_…', type, data }`, with no aggregate and no sequence. */
const stripeLike: EnvelopeReader = (body) => {
  const { id, type, data } = body as { id?: unknown; type?: unknown; data?: unknown }
  if (typeof id !== 'string' || typeof type !== 'string') return { errors: ['id and type are required'] }
  return { eventId: id, type, data }
}

function foreignConsumer(source: string) {
  const consumer = createConsumer({
    db: t.db,
    allowUnsigned: true,
    logger: quiet,
    envelope: stripeLike,
    source,
  })
  const handle = consumer.handle(async (event, trx) => {
    await trx.insertInto('foreign_effects').values({ event_id: event.eventId, source }).execute()
  })
  return async (id: string) => {
    const body = JSON.stringify({ id, type: 'payment_intent.succeeded', data: { object: { amount: 2000 } } })
    const answer = await handle({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new TextEncoder().encode(body),
    })
    return JSON.parse(answer.body).status as string
  }
}

async function foreignEffects(id: string) {
  const rows = await t.db
    .selectFrom('foreign_effects')
    .select('source')
    .where('event_id', '=', id)
    .orderBy('source')
    .execute()
  return rows.map((row) => row.source)
}

describe('text event ids of another sender', () => {
  it('records an evt_… id with NULL aggregate and sequence, and dedupes its redelivery', async () => {
    const send = foreignConsumer('stripe')
    expect(await send('evt_1Nabc')).toBe('applied')
    expect(await send('evt_1Nabc')).toBe('duplicate_ignored')
    expect(await processedRows('evt_1Nabc')).toEqual([
      {
        source: 'stripe',
        event_id: 'evt_1Nabc',
        aggregate_type: null,
        aggregate_id: null,
        sequence: null,
        type: 'payment_intent.succeeded',
      },
    ])
    expect(await foreignEffects('evt_1Nabc')).toEqual(['stripe'])
  })

  it("keeps another sender's id exactly as sent (case matters), and the same id under another source applies", async () => {
    const stripe = foreignConsumer('stripe')
    const other = foreignConsumer('stripe-account-2')
    expect(await stripe('evt_Case')).toBe('applied')
    expect(await stripe('evt_case')).toBe('applied')
    expect(await other('evt_Case')).toBe('applied')
    expect(await foreignEffects('evt_Case')).toEqual(['stripe', 'stripe-account-2'])
  })
})

describe("this project's UUID ids", () => {
  it('are recorded in lower case, so a redelivery writing the id in upper case is the same event', async () => {
    const relay = consumerOf({ source: 'relay-case', sequence: 'off' })
    const event = makeEvent({ aggregateId: 'upper-case' })
    expect((await relay.send(event, event.eventId.toUpperCase())).body.status).toBe('applied')
    expect((await relay.send(event)).body.status).toBe('duplicate_ignored')
    expect((await processedRows(event.eventId)).map((row) => row.event_id)).toEqual([event.eventId])
  })
})

describe('pruneProcessed and sources', () => {
  async function seed(source: string, eventId: string, ageDays: number) {
    await t.db
      .insertInto('processed_events')
      .values({
        source,
        event_id: eventId,
        type: 't',
        received_at: sql<Date>`now() - make_interval(days => ${ageDays})`,
      })
      .execute()
  }
  const sourcesOf = async (eventId: string) => (await processedRows(eventId)).map((row) => row.source)

  it("deletes an expired row by its whole key, keeping another source's row with the same id", async () => {
    const id = randomUUID()
    await seed('old-sender', id, 40)
    await seed('new-sender', id, 1)
    await pruneProcessed(t.db, { retention: '30d', logger: quiet })
    expect(await sourcesOf(id)).toEqual(['new-sender'])
  })

  it('with `source`, prunes only that source', async () => {
    const id = randomUUID()
    await seed('keep-long', id, 40)
    await seed('prune-me', id, 40)
    const result = await pruneProcessed(t.db, { retention: '30d', source: 'prune-me', logger: quiet })
    expect(result).toEqual({ removed: 1, caughtUp: true })
    expect(await sourcesOf(id)).toEqual(['keep-long'])
    await expect(pruneProcessed(t.db, { retention: '30d', source: '' })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'source',
    })
  })
})
