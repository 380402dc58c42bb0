import { randomUUID } from 'node:crypto'
import { parseSigningSecrets, signWebhook, type WireEnvelope } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, type DedupeHandler } from '../src/index.js'
import {
  appWith,
  countRows,
  createEffects,
  type HttpAnswer,
  listen,
  newSecret,
  post,
  quiet,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()
const keys = parseSigningSecrets(secret)
const MAX_BODY_BYTES = 8 * 1024
const RUNS = 80

let calls = 0
const servers: { url: string; close: () => Promise<void> }[] = []
let open: string
let signed: string

beforeAll(async () => {
  await createEffects(t.db)
  const handler: DedupeHandler = async (event, trx) => {
    calls++
    await writeEffect(trx, event)
  }
  const plain = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, maxBodyBytes: MAX_BODY_BYTES })
  const withSecret = createConsumer({ db: t.db, logger: quiet, maxBodyBytes: MAX_BODY_BYTES, secret })
  servers.push(
    await listen(appWith(plain.dedupe(handler))),
    await listen(appWith(withSecret.dedupe(handler))),
  )
  open = servers[0]!.url
  signed = servers[1]!.url
})

afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()))
})

// ---------------------------------------------------------------------------------------------------------------
// Generators. Every request they build is invalid by construction; the property is what the consumer does with it.

const uuid = fc.uuid({ version: 4 })
const text = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).filter((s) => !s.includes('\u0000'))

const validWire: fc.Arbitrary<WireEnvelope<unknown>> = fc.record({
  event_id: uuid,
  type: text,
  aggregate_type: text,
  aggregate_id: text,
  sequence: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
  occurred_at: fc
    .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
    .map((d) => d.toISOString()),
  data: fc.jsonValue({ maxDepth: 3 }),
})

const notAString = fc.oneof(
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 2 }),
)
const notAPositiveInteger = fc.oneof(
  fc.integer({ max: 0 }),
  fc.double({ noNaN: true }).filter((n) => !Number.isInteger(n)),
  fc.string(),
  fc.constant(null),
)

/** A valid envelope with exactly one defect that the wire contract forbids. */
const brokenWire: fc.Arbitrary<Record<string, unknown>> = fc
  .tuple(
    validWire,
    fc.oneof(
      fc
        .constantFrom('event_id', 'type', 'aggregate_type', 'aggregate_id', 'sequence', 'occurred_at', 'data')
        .map((field) => (wire: Record<string, unknown>) => {
          const { [field]: _removed, ...rest } = wire
          return rest
        }),
      fc
        .string()
        .filter((s) => !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s))
        .map((bad) => (wire: Record<string, unknown>) => ({ ...wire, event_id: bad })),
      fc
        .tuple(
          fc.constantFrom('type', 'aggregate_type', 'aggregate_id'),
          fc.oneof(notAString, fc.constant('')),
        )
        .map(([field, bad]) => (wire: Record<string, unknown>) => ({ ...wire, [field]: bad })),
      fc
        .constantFrom('type', 'aggregate_type', 'aggregate_id')
        .map((field) => (wire: Record<string, unknown>) => ({ ...wire, [field]: 'k'.repeat(256) })),
      notAPositiveInteger.map((bad) => (wire: Record<string, unknown>) => ({ ...wire, sequence: bad })),
      fc
        .oneof(fc.string(), notAString)
        .filter((s) => typeof s !== 'string' || Number.isNaN(Date.parse(s)) || !/^\d{4}-/.test(s))
        .map((bad) => (wire: Record<string, unknown>) => ({ ...wire, occurred_at: bad })),
      // NUL cannot be stored in a PostgreSQL text column: this must be a 400, not a database error
      fc
        .constantFrom('type', 'aggregate_type', 'aggregate_id')
        .map((field) => (wire: Record<string, unknown>) => ({ ...wire, [field]: `a\u0000b` })),
    ),
  )
  .map(([wire, breakIt]) => breakIt(wire as unknown as Record<string, unknown>))

interface Attempt {
  readonly body: Buffer
  readonly headers: Record<string, string>
}

const jsonHeaders = (body: Record<string, unknown>): Record<string, string> => ({
  'content-type': 'application/json',
  ...(typeof body.event_id === 'string' ? { 'x-idempotency-key': body.event_id } : {}),
  ...(typeof body.sequence === 'number' ? { 'x-event-sequence': String(body.sequence) } : {}),
})

/** Requests that are wrong in one way or another — content type, size, bytes, JSON, envelope or headers. */
const invalidAttempt: fc.Arbitrary<Attempt> = fc.oneof(
  // arbitrary text or bytes with plausible headers
  fc
    .tuple(
      fc.oneof(
        fc.string({ unit: 'binary', maxLength: 300 }),
        fc.jsonValue().map((v) => JSON.stringify(v)),
      ),
      uuid,
    )
    .map(([body, id]) => ({
      body: Buffer.from(body),
      headers: { 'content-type': 'application/json', 'x-idempotency-key': id, 'x-event-sequence': '1' },
    })),
  fc
    .uint8Array({ maxLength: 300 })
    .map((bytes) => ({ body: Buffer.from(bytes), headers: { 'content-type': 'application/json' } })),
  // a broken envelope
  brokenWire.map((wire) => ({ body: Buffer.from(JSON.stringify(wire)), headers: jsonHeaders(wire) })),
  // a valid envelope with headers that do not match it
  fc
    .tuple(
      validWire,
      fc.oneof(
        uuid.map((other) => ({ 'x-idempotency-key': other })),
        fc.string({ maxLength: 20 }).map((other) => ({ 'x-event-sequence': other })),
        fc.constant({ 'x-idempotency-key': undefined }),
        fc.constant({ 'x-event-sequence': undefined }),
      ),
    )
    .filter(([wire, change]) => {
      const key = (change as Record<string, string | undefined>)['x-idempotency-key']
      const sequence = (change as Record<string, string | undefined>)['x-event-sequence']
      return (
        ('x-idempotency-key' in change && key?.toLowerCase() !== wire.event_id.toLowerCase()) ||
        ('x-event-sequence' in change && sequence !== String(wire.sequence))
      )
    })
    .map(([wire, change]) => {
      const headers: Record<string, string> = jsonHeaders(wire as unknown as Record<string, unknown>)
      for (const [name, value] of Object.entries(change)) {
        if (value === undefined) delete headers[name]
        else headers[name] = value
      }
      return { body: Buffer.from(JSON.stringify(wire)), headers }
    }),
  // a valid envelope in the wrong media type
  fc
    .tuple(
      validWire,
      fc.constantFrom(
        'text/plain',
        'application/xml',
        'application/json; charset=iso-8859-1',
        'application/x-www-form-urlencoded',
      ),
    )
    .map(([wire, type]) => ({
      body: Buffer.from(JSON.stringify(wire)),
      headers: { ...jsonHeaders(wire as unknown as Record<string, unknown>), 'content-type': type },
    })),
  // a valid envelope over the size limit
  validWire.map((wire) => {
    const big = { ...wire, data: 'z'.repeat(MAX_BODY_BYTES) }
    return { body: Buffer.from(JSON.stringify(big)), headers: jsonHeaders(big) }
  }),
)

/**
 * Signs the exact random bytes with the consumer's secret, so only the content is wrong. Not through the
 * standardwebhooks package: it signs a Buffer as its UTF-8 decoding, so its signature over bytes that are not UTF-8
 * covers other bytes than those sent, and the consumer rightly answers 401. The id signed is the one the consumer
 * will read: HTTP strips a header value's leading and trailing whitespace, so an event id of " " arrives as an
 * empty webhook-id, and a signature over " " would rightly be a 401.
 */
function signAttempt(attempt: Attempt): Attempt {
  const id = attempt.headers['x-idempotency-key']?.trim() || randomUUID()
  const signature = signWebhook(keys, { eventId: id, body: attempt.body })
  return { ...attempt, headers: { ...attempt.headers, ...signature } }
}

async function expectNothingRecorded(): Promise<void> {
  expect(await countRows(t.db, 'processed_events')).toBe(0)
  expect(await countRows(t.db, 'consumer_cursors')).toBe(0)
  expect(await countRows(t.db, 'effects')).toBe(0)
  expect(calls).toBe(0)
}

function expectClientError(answer: HttpAnswer, allowed: readonly number[]): void {
  expect(answer.status, answer.text).toBeLessThan(500)
  expect(allowed).toContain(answer.status)
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
  expect(answer.json?.status).toBe(answer.status)
}

describe('property: an invalid request is refused with a 4xx and leaves no trace', () => {
  it('without a secret: 400, 413 or 415, never a 5xx, no row, no effect', async () => {
    await fc.assert(
      fc.asyncProperty(invalidAttempt, async (attempt) => {
        const answer = await post(open, attempt.body, attempt.headers)
        expectClientError(answer, [400, 413, 415])
        await expectNothingRecorded()
      }),
      { numRuns: RUNS },
    )
  })

  it('with a secret and a correct signature over the random body: 400, 413 or 415, never 401 or 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(invalidAttempt.map(signAttempt), async (attempt) => {
        const answer = await post(signed, attempt.body, attempt.headers)
        expectClientError(answer, [400, 413, 415])
        await expectNothingRecorded()
      }),
      { numRuns: RUNS },
    )
  })

  it('with a secret and no or a forged signature: 401 (or 413/415 before it), whatever the body', async () => {
    const forged = fc.oneof(
      fc.constant({}),
      fc.record({
        'webhook-id': uuid,
        'webhook-timestamp': fc.oneof(
          fc.constant(String(Math.floor(Date.now() / 1000))),
          fc.string({ maxLength: 12 }),
        ),
        'webhook-signature': fc.oneof(
          fc.base64String({ minLength: 4, maxLength: 64 }).map((s) => `v1,${s}`),
          fc.string({ maxLength: 80 }),
        ),
      }),
    )
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          invalidAttempt,
          validWire.map((wire) => ({
            body: Buffer.from(JSON.stringify(wire)),
            headers: jsonHeaders(wire as unknown as Record<string, unknown>),
          })),
        ),
        forged,
        async (attempt, signature) => {
          const answer = await post(signed, attempt.body, { ...attempt.headers, ...signature })
          expectClientError(answer, [401, 413, 415])
          await expectNothingRecorded()
        },
      ),
      { numRuns: RUNS },
    )
  })
})

describe('property: a valid event is applied once, then answered duplicate_ignored', () => {
  it('holds for random aggregates, sequences and data, signed', async () => {
    let posted = 0
    await fc.assert(
      fc.asyncProperty(validWire, async (wire) => {
        const body = JSON.stringify(wire)
        const headers = {
          ...jsonHeaders(wire as unknown as Record<string, unknown>),
          ...signWebhook(keys, { eventId: wire.event_id, body }),
        }
        if (Buffer.byteLength(body) > MAX_BODY_BYTES) return
        posted++
        const first = await post(signed, body, headers)
        expect(first.status, first.text).toBe(200)
        expect(['applied', 'stale_ignored']).toContain(first.json.status)
        const again = await post(signed, body, headers)
        expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: wire.event_id })
      }),
      { numRuns: 40 },
    )
    const applied = await countRows(t.db, 'effects')
    expect(applied).toBe(calls)
    expect(posted).toBeGreaterThan(30)
    expect(await countRows(t.db, 'processed_events')).toBe(posted)
  })
})
