import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type OutboxEvent, parseEnvelope, serializeEnvelope, spliceEnvelope } from '../src/index.js'

/** The fields of an event the relay sends: any text the contract accepts, in the full Unicode range. */
const fields: fc.Arbitrary<Omit<OutboxEvent<unknown>, 'data'>> = fc.record({
  eventId: fc.uuid(),
  type: fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  aggregateType: fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  aggregateId: fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  sequence: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
  occurredAt: fc
    .date({
      min: new Date('2000-01-01T00:00:00Z'),
      max: new Date('2100-01-01T00:00:00Z'),
      noInvalidDate: true,
    })
    .map((date) => date.toISOString()),
})

/** Payloads of every JSON shape, strings in the full Unicode range (lone surrogates included). */
const payloads = fc.jsonValue({ maxDepth: 4 })

describe('spliceEnvelope', () => {
  it('writes the body serializeEnvelope writes for the parsed event, whatever the payload', () => {
    fc.assert(
      fc.property(fields, payloads, (event, data) => {
        const body = spliceEnvelope(event, JSON.stringify(data))
        const parsed = parseEnvelope(body)
        if (!parsed.ok) throw new Error(`refused: ${parsed.errors.join('; ')}`)
        expect(serializeEnvelope(parsed.event)).toBe(body)
        expect(body).toBe(serializeEnvelope({ ...event, data: JSON.parse(JSON.stringify(data)) }))
      }),
      { numRuns: 500 },
    )
  })

  it('splices payload text as stored (jsonb text has spaces) without changing the value it carries', () => {
    fc.assert(
      fc.property(fields, payloads, fc.integer({ min: 1, max: 4 }), (event, data, indent) => {
        const body = spliceEnvelope(event, JSON.stringify(data, null, indent))
        const parsed = parseEnvelope(body)
        if (!parsed.ok) throw new Error(`refused: ${parsed.errors.join('; ')}`)
        expect(parsed.event).toEqual({ ...event, data: JSON.parse(JSON.stringify(data)) })
        expect(serializeEnvelope(parsed.event)).toBe(spliceEnvelope(event, JSON.stringify(data)))
      }),
      { numRuns: 200 },
    )
  })

  it('keeps the contract field order', () => {
    const body = spliceEnvelope(
      {
        eventId: '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a',
        type: 'order.created',
        aggregateType: 'order',
        aggregateId: '42',
        sequence: 3,
        occurredAt: '2026-12-02T09:00:00.000Z',
      },
      '{"total": 12.5}',
    )
    expect(body).toBe(
      '{"event_id":"0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a","type":"order.created","aggregate_type":"order",' +
        '"aggregate_id":"42","sequence":3,"occurred_at":"2026-12-02T09:00:00.000Z","data":{"total": 12.5}}',
    )
  })
})
