import { HEADERS } from '@outbox/protocol'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { Webhook } from 'standardwebhooks'
import { afterEach, describe, expect, it } from 'vitest'
import { enqueue, enqueueMany, Relay, silentLogger, stats } from '../src/index.js'
import { expectLanesLive, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

// Whatever a test did, every lane it leaves can still move.
afterEach(async () => {
  await expectLanesLive(t.db)
})

describe('relay delivery', () => {
  it('delivers the wire contract, marks sent after 2xx, and records the consumer status', async () => {
    const sink = await startSink()
    try {
      const { eventId } = await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 'w1',
          eventType: 'order.created',
          payload: { total: 12.5, items: ['a'] },
        }),
      )
      const relay = new Relay({ db: t.db, endpoint: sink.url, logger: silentLogger })
      expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
      expect(sink.requests).toHaveLength(1)
      const request = sink.requests[0]!
      expect(request.headers['content-type']).toBe('application/json')
      expect(request.headers[HEADERS.idempotencyKey]).toBe(eventId)
      expect(request.headers[HEADERS.eventSequence]).toBe('1')
      expect(request.headers[HEADERS.webhookSignature]).toBeUndefined()
      expect(Object.keys(request.json)).toEqual([
        'event_id',
        'type',
        'aggregate_type',
        'aggregate_id',
        'sequence',
        'occurred_at',
        'data',
      ])
      expect(request.json).toMatchObject({
        event_id: eventId,
        type: 'order.created',
        aggregate_type: 'order',
        aggregate_id: 'w1',
        sequence: 1,
        data: { total: 12.5, items: ['a'] },
      })
      expect(new Date(request.json.occurred_at).toISOString()).toBe(request.json.occurred_at)
      const row = await t.db
        .selectFrom('outbox')
        .selectAll()
        .where('event_id', '=', eventId)
        .executeTakeFirstOrThrow()
      expect(row).toMatchObject({ status: 'sent', attempts: 1, last_status: 200, delivery_status: 'applied' })
      expect(await relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
      expect((await stats(t.db)).pending).toBe(0)
    } finally {
      await sink.close()
    }
  })

  it('warns once through its logger, at its first request, when it sends unsigned; never when it signs', async () => {
    const sink = await startSink()
    try {
      const warnings = (secret?: string) => {
        const lines: { fields: Record<string, unknown>; message: string }[] = []
        const logger = {
          ...silentLogger,
          warn: (fields: Record<string, unknown>, message: string) => lines.push({ fields, message }),
        }
        const relay = new Relay({ db: t.db, endpoint: sink.url, logger, ...(secret ? { secret } : {}) })
        return { relay, lines }
      }
      const unsigned = warnings()
      // Nothing sent yet: nothing to warn about.
      expect(await unsigned.relay.runOnce()).toEqual({ delivered: 0, failed: 0, dead: 0 })
      expect(unsigned.lines).toEqual([])
      for (const round of [1, 2]) {
        await seedEvents(t.db, [`unsigned-${round}-a`, `unsigned-${round}-b`], 1)
        expect(await unsigned.relay.runOnce()).toEqual({ delivered: 2, failed: 0, dead: 0 })
      }
      expect(sink.requests.map((request) => request.headers[HEADERS.webhookSignature])).toEqual(
        Array(4).fill(undefined),
      )
      expect(unsigned.lines).toEqual([
        {
          fields: { signed: false },
          message: expect.stringMatching(
            /^sending webhooks UNSIGNED: no signing secret is set, so the subscriber cannot tell these requests from forged ones; give the relay a secret/,
          ),
        },
      ])

      const signed = warnings('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')
      await seedEvents(t.db, ['signed-a'], 1)
      expect(await signed.relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
      expect(sink.requests.at(-1)!.headers[HEADERS.webhookSignature]).toMatch(/^v1,/)
      expect(signed.lines).toEqual([])
    } finally {
      await sink.close()
    }
  })

  it('signs with every secret so both verify with the public standardwebhooks package', async () => {
    const secrets = [
      'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      `whsec_${Buffer.from('second-secret-of-24-bytes').toString('base64')}`,
    ]
    const sink = await startSink()
    try {
      await t.db.transaction().execute((trx) =>
        enqueue(trx, {
          aggregateType: 'order',
          aggregateId: 's1',
          eventType: 'order.created',
          payload: { a: 1 },
        }),
      )
      const relay = new Relay({ db: t.db, endpoint: sink.url, secret: secrets, logger: silentLogger })
      await relay.runOnce()
      const request = sink.requests[0]!
      const signatures = String(request.headers[HEADERS.webhookSignature]).split(' ')
      expect(signatures).toHaveLength(2)
      const headers = {
        'webhook-id': String(request.headers['webhook-id']),
        'webhook-timestamp': String(request.headers['webhook-timestamp']),
        'webhook-signature': String(request.headers['webhook-signature']),
      }
      expect(headers['webhook-id']).toBe(request.json.event_id)
      for (const secret of secrets)
        expect(new Webhook(secret).verify(request.body, headers)).toEqual(request.json)
      expect(() =>
        new Webhook(`whsec_${Buffer.from('not-the-secret-of-24-bytes').toString('base64')}`).verify(
          request.body,
          headers,
        ),
      ).toThrow()
    } finally {
      await sink.close()
    }
  })

  it('a backlog written in long runs per aggregate is claimed lane after lane at once, not one lane per poll', async () => {
    // Each aggregate's 300 rows were written together, so a claim's scan window (256 rows here) sees one lane:
    // the claim comes back with fewer lanes than wanted but a full window, and the relay must claim again at once.
    const aggregates = ['run-1', 'run-2', 'run-3', 'run-4', 'run-5']
    for (const aggregateId of aggregates) {
      await t.db.transaction().execute((trx) =>
        enqueueMany(
          trx,
          Array.from({ length: 300 }, (_, n) => ({
            aggregateType: 'order',
            aggregateId,
            eventType: 'order.updated',
            payload: { n },
          })),
        ),
      )
    }
    let mostLanesInFlight = 0
    const sink = await startSink(async () => {
      mostLanesInFlight = Math.max(mostLanesInFlight, [...sink.inFlight.values()].filter((n) => n > 0).length)
      await new Promise((resolve) => setTimeout(resolve, 2))
      return { status: 200, body: { status: 'applied' } }
    })
    const relay = new Relay({
      db: t.db,
      endpoint: sink.url,
      concurrency: 4,
      pollIntervalMs: 600_000,
      listen: false,
      logger: silentLogger,
    })
    try {
      await relay.start()
      // A relay that waited for its poll after each short claim would wait 10 min at the first: the ceiling is far
      // below that, and generous for a loaded machine.
      await waitFor(() => sink.requests.length >= 1500, 'the whole backlog', 60_000)
      expect(mostLanesInFlight).toBeGreaterThan(1)
      for (const aggregateId of aggregates) {
        const sequences = sink.requests
          .filter((r) => r.json.aggregate_id === aggregateId)
          .map((r) => r.json.sequence)
        expect(sequences).toEqual(Array.from({ length: 300 }, (_, n) => n + 1))
      }
    } finally {
      await relay.stop()
      await sink.close()
    }
  })
})
