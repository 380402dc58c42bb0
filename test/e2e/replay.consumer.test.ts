// Replay to one subscription, end to end: the producer sends a subscription's events again with their ids and
// sequences; a real consumer on its own database answers what it has `duplicate_ignored` and applies nothing twice.
// And what a 'strict' consumer does when its cursors were reset: its processed ids decide, not its cursors.
import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createConsumer, type SequencePolicy } from '@outbox/consumer'
import {
  createSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  replay,
  silentLogger,
} from '@outbox/producer'
import { useTestDatabase } from '@outbox/test-harness'
import { type Kysely, sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const producer = useTestDatabase()
const consumerDatabase = useTestDatabase()
const closers: (() => Promise<void>)[] = []

beforeAll(async () => {
  await disableSubscription(producer.db, IMPLICIT_SUBSCRIPTION_ID)
  await sql`CREATE TABLE applied (source text, event_id uuid, aggregate_id text, sequence integer)`.execute(
    consumerDatabase.db,
  )
})

afterAll(async () => {
  await Promise.all(closers.map((close) => close()))
})

/** A consumer on the second database; its handler's effect is one `applied` row per applied event. */
async function serveConsumer(source: string, secret: string, sequence: SequencePolicy): Promise<string> {
  const db = consumerDatabase.db as Kysely<any>
  const consumer = createConsumer({ db, secret, source, sequence, logger: silentLogger })
  const server = createServer(
    consumer.node(async (event, trx) => {
      await trx
        .insertInto('applied')
        .values({
          source,
          event_id: event.eventId,
          aggregate_id: event.aggregateId,
          sequence: event.sequence,
        })
        .execute()
    }),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
}

/** A relay for one stored subscription that records each 2xx's consumer status, per aggregate in order. */
function relayRecording(subscriptionId: string) {
  const relay = new Relay({
    db: producer.db,
    subscriptions: [subscriptionId],
    allowPrivateNetworks: true,
    logger: silentLogger,
  })
  const answers: { aggregateId: string; sequence: number; status: string | null; httpStatus: number }[] = []
  relay.on('delivery:success', (event) =>
    answers.push({
      aggregateId: event.aggregateId,
      sequence: event.sequence,
      status: event.deliveryStatus,
      httpStatus: event.httpStatus,
    }),
  )
  const blocked: { aggregateId: string; reason: string }[] = []
  relay.on('lane:blocked', (event) => blocked.push({ aggregateId: event.aggregateId, reason: event.reason }))
  const drain = async () => {
    for (let cycle = 0; cycle < 20; cycle++) {
      const { delivered, failed, dead } = await relay.runOnce()
      if (delivered + failed + dead === 0) return
    }
  }
  return { answers, blocked, drain }
}

async function publish(aggregateId: string, count: number): Promise<void> {
  for (let n = 0; n < count; n++) {
    await producer.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: { n } }),
      )
  }
}

async function appliedRows(source: string) {
  const { rows } = await sql<{ aggregate_id: string; sequence: number }>`
    SELECT aggregate_id, sequence FROM applied WHERE source = ${source} ORDER BY aggregate_id, sequence`.execute(
    consumerDatabase.db,
  )
  return rows.map((row) => `${row.aggregate_id}:${row.sequence}`)
}

describe('replay to a real consumer', () => {
  it('an ordered consumer answers every replayed event duplicate_ignored and applies nothing twice', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`
    const url = await serveConsumer('ordered', secret, 'monotonic')
    const { id } = await createSubscription(producer.db, { url, secret, name: 'ordered' })
    for (const aggregate of ['m1', 'm2', 'm3']) await publish(aggregate, 3)
    const { answers, drain } = relayRecording(id)
    await drain()
    expect(answers.map((answer) => answer.status)).toEqual(Array(9).fill('applied'))

    expect(await replay(producer.db, { subscriptionId: 'ordered', since: '1h' })).toMatchObject({
      aggregates: 3,
      events: 9,
      complete: true,
    })
    await drain()
    const replayed = answers.slice(9)
    expect(replayed.map((answer) => answer.status)).toEqual(Array(9).fill('duplicate_ignored'))
    for (const aggregate of ['m1', 'm2', 'm3']) {
      const sequences = replayed.filter((answer) => answer.aggregateId === aggregate).map((a) => a.sequence)
      expect(sequences).toEqual([1, 2, 3])
    }
    expect(await appliedRows('ordered')).toEqual(
      ['m1', 'm2', 'm3'].flatMap((aggregate) => [1, 2, 3].map((n) => `${aggregate}:${n}`)),
    )
  })

  it('a strict consumer whose cursors were reset: kept ids answer duplicate_ignored; pruned ids apply again, from sequence 1, or 409 on a gap', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`
    const url = await serveConsumer('strict', secret, 'strict')
    const { id } = await createSubscription(producer.db, { url, secret, name: 'strict' })
    await publish('s1', 3)
    const { answers, blocked, drain } = relayRecording(id)
    await drain()
    expect(await appliedRows('strict')).toEqual(['s1:1', 's1:2', 's1:3'])
    const consumerDb = consumerDatabase.db
    const resetCursors = () => sql`DELETE FROM consumer_cursors WHERE source = 'strict'`.execute(consumerDb)
    const forgetIds = () => sql`DELETE FROM processed_events WHERE source = 'strict'`.execute(consumerDb)

    // Cursors reset, ids kept: the id check comes first, so nothing applies again and no cursor is made.
    await resetCursors()
    await replay(producer.db, { subscriptionId: 'strict', since: '1h' })
    await drain()
    expect(answers.slice(3).map((answer) => answer.status)).toEqual(Array(3).fill('duplicate_ignored'))
    expect(await appliedRows('strict')).toEqual(['s1:1', 's1:2', 's1:3'])
    const { rows: cursors } = await sql`SELECT 1 FROM consumer_cursors WHERE source = 'strict'`.execute(
      consumerDb,
    )
    expect(cursors).toEqual([])

    // Ids gone too (pruned): every replayed event is unseen, and applies again in order from sequence 1.
    await forgetIds()
    await replay(producer.db, { subscriptionId: 'strict', since: '1h' })
    await drain()
    expect(answers.slice(6).map((answer) => [answer.sequence, answer.status])).toEqual([
      [1, 'applied'],
      [2, 'applied'],
      [3, 'applied'],
    ])
    expect(await appliedRows('strict')).toEqual(['s1:1', 's1:1', 's1:2', 's1:2', 's1:3', 's1:3'])

    // A replay that starts after sequence 1, to a consumer without cursor or ids: its first event is a gap (409),
    // which parks the lane; it heals only when sequence 1 comes (here: a replay from the start).
    await resetCursors()
    await forgetIds()
    const { rows: second } = await sql<{ created_at: Date }>`
      SELECT created_at FROM outbox WHERE subscription_id = ${id} AND sequence = 2`.execute(producer.db)
    await replay(producer.db, { subscriptionId: 'strict', since: second[0]!.created_at })
    await drain()
    expect(blocked).toEqual([{ aggregateId: 's1', reason: 'conflict' }])
    expect(answers).toHaveLength(9)
    await replay(producer.db, { subscriptionId: 'strict', since: '1h' })
    await drain()
    expect(answers.slice(9).map((answer) => [answer.sequence, answer.status])).toEqual([
      [1, 'applied'],
      [2, 'applied'],
      [3, 'applied'],
    ])
  })
})
