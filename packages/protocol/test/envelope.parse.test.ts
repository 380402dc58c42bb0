import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type JsonValue,
  MAX_KEY_LENGTH,
  type OutboxEvent,
  ProtocolError,
  parseEnvelope,
  serializeEnvelope,
  toWireEnvelope,
  validateEnvelope,
} from '../src/index.js'

const valid = {
  event_id: '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a',
  type: 'order.created',
  aggregate_type: 'order',
  aggregate_id: '42',
  sequence: 3,
  occurred_at: '2026-12-02T09:00:00.000Z',
  data: { total: 12.5, items: ['a', 'b'] },
}

function refused(result: ReturnType<typeof validateEnvelope>): readonly string[] {
  if (result.ok) throw new Error(`expected a refusal, got ${JSON.stringify(result.event)}`)
  return result.errors
}

describe('parseEnvelope', () => {
  it('turns a contract body into the camelCase event', () => {
    const result = parseEnvelope(JSON.stringify(valid))
    expect(result).toEqual({
      ok: true,
      event: {
        eventId: valid.event_id,
        type: 'order.created',
        aggregateType: 'order',
        aggregateId: '42',
        sequence: 3,
        occurredAt: '2026-12-02T09:00:00.000Z',
        data: { total: 12.5, items: ['a', 'b'] },
      },
    })
  })

  it('reads the exact bytes of a request body', () => {
    const result = parseEnvelope(new TextEncoder().encode(JSON.stringify({ ...valid, data: 'héllo ✓' })))
    expect(result.ok && result.event.data).toBe('héllo ✓')
  })

  it('refuses malformed JSON and invalid UTF-8 as malformed_json', () => {
    for (const body of ['', '{', '{"event_id":', 'undefined', new Uint8Array([0x7b, 0xff, 0xfe, 0x7d])]) {
      const result = parseEnvelope(body)
      expect(result).toEqual({
        ok: false,
        code: 'malformed_json',
        errors: ['the body is not valid UTF-8 JSON'],
      })
    }
  })

  it('refuses a body that is not an object', () => {
    for (const body of ['null', '[]', '42', '"text"', 'true']) {
      const result = parseEnvelope(body)
      expect(result).toMatchObject({ ok: false, code: 'invalid_envelope' })
      expect(refused(result)).toEqual(['the body must be a JSON object'])
    }
  })

  it('accepts null data and extra fields, but not missing data', () => {
    expect(validateEnvelope({ ...valid, data: null }).ok).toBe(true)
    expect(validateEnvelope({ ...valid, extra: 'ignored' }).ok).toBe(true)
    const { data: _data, ...withoutData } = valid
    expect(refused(validateEnvelope(withoutData))).toEqual(['data is required (use null for no data)'])
  })

  it('names every bad field at once', () => {
    const errors = refused(
      validateEnvelope({
        event_id: 'nope',
        type: '',
        aggregate_id: 7,
        sequence: 0,
        occurred_at: 'yesterday',
      }),
    )
    expect(errors).toEqual([
      'event_id must be a UUID string',
      `type must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`,
      `aggregate_type must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`,
      `aggregate_id must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`,
      'sequence must be a positive integer',
      'occurred_at must be an ISO-8601 timestamp',
      'data is required (use null for no data)',
    ])
  })

  it.each([
    ['sequence', 0],
    ['sequence', -1],
    ['sequence', 1.5],
    ['sequence', '3'],
    ['sequence', 2 ** 53],
    ['sequence', null],
    ['event_id', '0b9f6c1e2f4a4c1b9a573c0f6c1e2f4a'],
    ['event_id', 42],
    ['aggregate_id', 'x'.repeat(MAX_KEY_LENGTH + 1)],
    ['aggregate_type', ''],
    ['type', null],
    ['occurred_at', '2026-12-02'],
    ['occurred_at', '2026-13-45T99:00:00Z'],
    ['occurred_at', 1_700_000_000_000],
  ])('refuses %s = %j', (field, value) => {
    const errors = refused(validateEnvelope({ ...valid, [field]: value }))
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatch(new RegExp(`^${field} `))
  })

  it('accepts the boundaries of the contract', () => {
    expect(validateEnvelope({ ...valid, aggregate_id: 'x'.repeat(MAX_KEY_LENGTH) }).ok).toBe(true)
    expect(validateEnvelope({ ...valid, sequence: Number.MAX_SAFE_INTEGER }).ok).toBe(true)
    expect(validateEnvelope({ ...valid, event_id: valid.event_id.toUpperCase() }).ok).toBe(true)
    expect(validateEnvelope({ ...valid, occurred_at: '2026-12-02T10:00:00.123456+01:00' }).ok).toBe(true)
  })
})

describe('serializeEnvelope', () => {
  it('writes the contract fields in contract order', () => {
    const event: OutboxEvent = {
      eventId: valid.event_id,
      type: valid.type,
      aggregateType: valid.aggregate_type,
      aggregateId: valid.aggregate_id,
      sequence: valid.sequence,
      occurredAt: valid.occurred_at,
      data: valid.data,
    }
    expect(serializeEnvelope(event)).toBe(JSON.stringify(valid))
    expect(toWireEnvelope(event)).toEqual(valid)
  })

  it('throws a ProtocolError for data JSON cannot carry, instead of sending a body the contract refuses', () => {
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    for (const data of [cyclic, 1n, { nested: 2n }, undefined]) {
      const event = { ...toEvent(valid), data: data as unknown as JsonValue }
      expect(() => serializeEnvelope(event)).toThrow(ProtocolError)
      try {
        serializeEnvelope(event)
      } catch (error) {
        expect(error).toMatchObject({
          code: 'ERR_OUTBOX_INVALID_ENVELOPE',
          message: expect.stringMatching(/data|JSON/),
        })
      }
    }
  })
})

function toEvent(wire: typeof valid): OutboxEvent {
  return {
    eventId: wire.event_id,
    type: wire.type,
    aggregateType: wire.aggregate_type,
    aggregateId: wire.aggregate_id,
    sequence: wire.sequence,
    occurredAt: wire.occurred_at,
    data: wire.data,
  }
}

// What the wire carries is JSON text, so data is compared after one JSON trip (which turns -0 into 0).
const jsonData = fc.jsonValue({ maxDepth: 4 }).map((value) => JSON.parse(JSON.stringify(value)) as JsonValue)
const key = fc
  .string({ minLength: 1, maxLength: MAX_KEY_LENGTH, unit: 'grapheme' })
  .filter((text) => text.length <= MAX_KEY_LENGTH)
const validEvent: fc.Arbitrary<OutboxEvent> = fc.record({
  eventId: fc.uuid(),
  type: key,
  aggregateType: key,
  aggregateId: key,
  sequence: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
  occurredAt: fc
    .date({
      min: new Date('1970-01-01T00:00:00Z'),
      max: new Date('9999-12-31T23:59:59Z'),
      noInvalidDate: true,
    })
    .map((date) => date.toISOString()),
  data: jsonData,
})

describe('envelope properties', () => {
  it('parseEnvelope(serializeEnvelope(event)) gives the event back, as text and as bytes', () => {
    fc.assert(
      fc.property(validEvent, (event) => {
        const body = serializeEnvelope(event)
        expect(parseEnvelope(body)).toEqual({ ok: true, event })
        expect(parseEnvelope(new TextEncoder().encode(body))).toEqual({ ok: true, event })
      }),
      { numRuns: 300 },
    )
  })

  it('never throws on arbitrary text or bytes, and refuses garbage with a reason', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.json(), fc.uint8Array()), (body) => {
        const result = parseEnvelope(body)
        if (!result.ok) {
          expect(['malformed_json', 'invalid_envelope']).toContain(result.code)
          expect(result.errors.length).toBeGreaterThan(0)
          for (const error of result.errors) expect(error).toMatch(/\S/)
        }
      }),
      { numRuns: 500 },
    )
  })

  it('never throws on arbitrary values and never accepts a non-object', () => {
    fc.assert(
      fc.property(fc.anything({ withNullPrototype: true, withBigInt: true, withMap: true }), (value) => {
        const result = validateEnvelope(value)
        if (typeof value !== 'object' || value === null || Array.isArray(value)) expect(result.ok).toBe(false)
        if (!result.ok) expect(result.errors.length).toBeGreaterThan(0)
      }),
      { numRuns: 500 },
    )
  })

  it('refuses an event with any one field replaced by a wrong value, naming that field', () => {
    const fields = ['event_id', 'type', 'aggregate_type', 'aggregate_id', 'sequence', 'occurred_at'] as const
    const wrong = fc.oneof(
      fc.constant(undefined),
      fc.constant(null),
      fc.boolean(),
      fc.double({ noInteger: true }),
      fc.integer({ max: 0 }),
      fc.constant(''),
      fc.string({ minLength: MAX_KEY_LENGTH + 1, maxLength: MAX_KEY_LENGTH + 3 }),
      fc.array(fc.integer(), { maxLength: 2 }),
      fc.object({ maxDepth: 1 }),
    )
    fc.assert(
      fc.property(validEvent, fc.constantFrom(...fields), wrong, (event, field, value) => {
        const wire: Record<string, unknown> = { ...toWireEnvelope(event), [field]: value }
        if (value === undefined) delete wire[field]
        const result = validateEnvelope(wire)
        // Every replacement above is invalid for every one of these fields.
        expect(result.ok).toBe(false)
        if (!result.ok) expect(result.errors.some((error) => error.startsWith(`${field} `))).toBe(true)
      }),
      { numRuns: 500 },
    )
  })
})
