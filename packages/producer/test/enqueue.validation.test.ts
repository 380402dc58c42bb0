import { useTestDatabase } from '@outbox/test-harness'
import { sql, type Transaction } from 'kysely'
import { afterEach, describe, expect, it } from 'vitest'
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  type EnqueueInput,
  type EnqueueOptions,
  enqueue,
  enqueueMany,
  OutboxError,
  type OutboxErrorCode,
} from '../src/index.js'

const t = useTestDatabase()

const good: EnqueueInput = {
  aggregateType: 'order',
  aggregateId: '42',
  eventType: 'order.created',
  payload: { total: 3 },
}

async function countRows(): Promise<{ outbox: number; counters: number; lanes: number }> {
  const { rows } = await sql<{ outbox: string; counters: string; lanes: string }>`
    SELECT (SELECT count(*) FROM outbox) AS outbox, (SELECT count(*) FROM outbox_counter) AS counters,
           (SELECT count(*) FROM outbox_lane) AS lanes`.execute(t.db)
  const row = rows[0]!
  return { outbox: Number(row.outbox), counters: Number(row.counters), lanes: Number(row.lanes) }
}

/**
 * Runs `attempt` in a transaction that then COMMITS, expects an OutboxError, and checks that the transaction was
 * still usable afterwards (validation failed before any SQL, so the caller's work is not poisoned).
 */
async function expectRefused(
  attempt: (trx: Transaction<any>) => Promise<unknown>,
  code: OutboxErrorCode,
  message: RegExp,
): Promise<OutboxError> {
  let caught: unknown
  await t.db.transaction().execute(async (trx) => {
    try {
      await attempt(trx)
    } catch (error) {
      caught = error
    }
    const { rows } = await sql<{ ok: number }>`SELECT 1 AS ok`.execute(trx)
    expect(rows).toEqual([{ ok: 1 }])
  })
  expect(caught).toBeInstanceOf(OutboxError)
  const error = caught as OutboxError
  expect(error.code).toBe(code)
  expect(error.message).toMatch(message)
  return error
}

const cyclic: Record<string, unknown> = { name: 'loop' }
cyclic.self = cyclic

describe('enqueue refuses bad input before writing anything', () => {
  afterEach(async () => {
    expect(await countRows()).toEqual({ outbox: 0, counters: 0, lanes: 0 })
  })

  it.each<[string, Record<string, unknown>, RegExp]>([
    ['an empty aggregateType', { aggregateType: '' }, /^aggregateType must not be empty$/],
    ['an empty aggregateId', { aggregateId: '' }, /^aggregateId must not be empty$/],
    ['an empty eventType', { eventType: '' }, /^eventType must not be empty$/],
    ['a whitespace-only aggregateId', { aggregateId: ' \t\n ' }, /^aggregateId must not be empty$/],
    ['a whitespace-only eventType', { eventType: '   ' }, /^eventType must not be empty$/],
    ['a numeric aggregateId', { aggregateId: 42 }, /aggregateId must be a string, got number \(use String/],
    [
      'a missing aggregateType',
      { aggregateType: undefined },
      /aggregateType must be a string, got undefined/,
    ],
    ['a null eventType', { eventType: null }, /eventType must be a string, got object/],
    [
      'a too long aggregateType',
      { aggregateType: 'a'.repeat(256) },
      /aggregateType is 256 characters; the limit is 255/,
    ],
    [
      'a too long aggregateId',
      { aggregateId: '9'.repeat(1000) },
      /aggregateId is 1000 characters; the limit is 255/,
    ],
    ['a NUL in aggregateId', { aggregateId: 'a\u0000b' }, /aggregateId contains a NUL character/],
    [
      'a lone surrogate in eventType',
      { eventType: 'order.\ud800' },
      /eventType contains a lone UTF-16 surrogate/,
    ],
  ])('%s → ERR_OUTBOX_INVALID_EVENT', async (_label, patch, message) => {
    await expectRefused(
      (trx) => enqueue(trx, { ...good, ...patch } as EnqueueInput),
      'ERR_OUTBOX_INVALID_EVENT',
      message,
    )
  })

  it('a non-object event → ERR_OUTBOX_INVALID_EVENT', async () => {
    for (const event of [null, undefined, 'order.created', 42]) {
      await expectRefused(
        (trx) => enqueue(trx, event as unknown as EnqueueInput),
        'ERR_OUTBOX_INVALID_EVENT',
        /must be an object with aggregateType, aggregateId, eventType and payload/,
      )
    }
  })

  it.each<[string, unknown, RegExp]>([
    ['a bigint', { amount: 10n }, /not JSON-serialisable \(.*BigInt.*\); convert bigints to strings/],
    ['a top-level bigint', 10n, /not JSON-serialisable/],
    ['a cycle', cyclic, /not JSON-serialisable \(.*circular.*\).*remove cycles/is],
    ['undefined at top level', undefined, /payload is undefined, which JSON cannot represent/],
    ['a function at top level', () => 1, /payload is function, which JSON cannot represent/],
    ['a symbol at top level', Symbol('x'), /payload is symbol, which JSON cannot represent/],
    [
      'a NUL in a string',
      { note: 'a\u0000b' },
      /payload contains a NUL character \(\\u0000\), which PostgreSQL jsonb/,
    ],
    ['a NUL in a key', { 'a\u0000': 1 }, /payload contains a NUL character/],
    ['a lone high surrogate', { note: 'x\ud83d' }, /payload contains a lone UTF-16 surrogate \(\\ud83d\)/],
    ['a lone low surrogate', ['\udc00'], /payload contains a lone UTF-16 surrogate \(\\udc00\)/],
  ])('a payload with %s → ERR_OUTBOX_PAYLOAD_NOT_JSON', async (_label, payload, message) => {
    const error = await expectRefused(
      (trx) => enqueue(trx, { ...good, payload }),
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      message,
    )
    if (typeof payload === 'object' && payload !== null && 'amount' in payload) {
      expect(error.cause).toBeInstanceOf(TypeError)
    }
  })

  it('a payload over the default 256 KiB limit → ERR_OUTBOX_PAYLOAD_TOO_LARGE', async () => {
    expect(DEFAULT_MAX_PAYLOAD_BYTES).toBe(262_144)
    // The limit counts bytes as sent, not characters: "é" is two bytes in UTF-8, plus two quotes.
    await expectRefused(
      (trx) => enqueue(trx, { ...good, payload: 'é'.repeat(131_072) }),
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      /payload is 262146 bytes as sent .*; the limit is 262144/,
    )
  })

  it('the limit counts the payload as the relay sends it: jsonb prints numbers in full and spaces after separators', async () => {
    // 2,500 bytes of JSON.stringify, but 1e300 prints as 301 digits: 250 of them are ≈ 75 KB on the wire.
    const expanding = Array.from({ length: 250 }, () => 1e300)
    expect(JSON.stringify(expanding).length).toBeLessThan(2_000)
    await expectRefused(
      (trx) => enqueue(trx, { ...good, payload: expanding }, { maxPayloadBytes: 50_000 }),
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      /payload is 75750 bytes as sent/,
    )
  })

  it('a payload over a configured limit → ERR_OUTBOX_PAYLOAD_TOO_LARGE', async () => {
    await expectRefused(
      (trx) => enqueue(trx, { ...good, payload: { note: 'x'.repeat(100) } }, { maxPayloadBytes: 100 }),
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      // 111 bytes of JSON.stringify, and the space PostgreSQL prints after the colon.
      /payload is 112 bytes as sent .*; the limit is 100 .*maxPayloadBytes/,
    )
  })

  it.each<[string, EnqueueOptions, RegExp]>([
    ['a zero maxPayloadBytes', { maxPayloadBytes: 0 }, /maxPayloadBytes must be a positive integer, got 0/],
    ['a fractional maxPayloadBytes', { maxPayloadBytes: 1.5 }, /maxPayloadBytes must be a positive integer/],
    ['an infinite maxPayloadBytes', { maxPayloadBytes: Number.POSITIVE_INFINITY }, /maxPayloadBytes/],
    [
      'a schema that is not a plain identifier',
      { schema: 'Tenant-A; DROP TABLE outbox' },
      /schema must be a lower-case SQL identifier/,
    ],
  ])('%s → ERR_OUTBOX_INVALID_OPTION', async (_label, options, message) => {
    await expectRefused((trx) => enqueue(trx, good, options), 'ERR_OUTBOX_INVALID_OPTION', message)
    await expectRefused((trx) => enqueueMany(trx, [good], options), 'ERR_OUTBOX_INVALID_OPTION', message)
  })

  it('enqueueMany names the bad event and writes none of the good ones', async () => {
    await expectRefused(
      (trx) => enqueueMany(trx, [good, { ...good, aggregateId: '43' }, { ...good, payload: 1n }]),
      'ERR_OUTBOX_PAYLOAD_NOT_JSON',
      /^events\[2\]\.payload is not JSON-serialisable/,
    )
    await expectRefused(
      (trx) => enqueueMany(trx, [good, { ...good, eventType: ' ' }]),
      'ERR_OUTBOX_INVALID_EVENT',
      /^events\[1\]\.eventType must not be empty$/,
    )
    await expectRefused(
      (trx) => enqueueMany(trx, [{ ...good, payload: 'x'.repeat(20) }], { maxPayloadBytes: 10 }),
      'ERR_OUTBOX_PAYLOAD_TOO_LARGE',
      /^events\[0\]\.payload is 22 bytes/,
    )
  })

  it('enqueueMany refuses something that is not an array', async () => {
    await expectRefused(
      (trx) => enqueueMany(trx, good as unknown as EnqueueInput[]),
      'ERR_OUTBOX_INVALID_EVENT',
      /enqueueMany takes an array of events/,
    )
  })

  it('the error keeps a stable name for logs', async () => {
    const error = await expectRefused(
      (trx) => enqueue(trx, { ...good, aggregateId: '' }),
      'ERR_OUTBOX_INVALID_EVENT',
      /empty/,
    )
    expect(error.name).toBe('OutboxError')
    expect(error).toBeInstanceOf(Error)
  })
})

describe('enqueue accepts the edges of valid input', () => {
  it('stores keys at the length limit, payloads at the byte limit, and text that only looks like an escape', async () => {
    const longKey = 'k'.repeat(255)
    const exact = 'é'.repeat(131_071) // 262_142 bytes + 2 quotes = exactly the limit
    const lookalike = { path: 'C:\\u0000\\dir', text: '\\ud800 is a surrogate', emoji: '😀' }
    const results = await t.db
      .transaction()
      .execute(async (trx) => [
        await enqueue(trx, { ...good, aggregateType: longKey, aggregateId: longKey, eventType: longKey }),
        await enqueue(trx, { ...good, aggregateId: 'exact', payload: exact }),
        await enqueue(trx, { ...good, aggregateId: 'lookalike', payload: lookalike }),
        await enqueue(trx, { ...good, aggregateId: 'null', payload: null }),
        await enqueue(trx, { ...good, aggregateId: 'small', payload: 'abcdefgh' }, { maxPayloadBytes: 10 }),
      ])
    const rows = await t.db
      .selectFrom('outbox')
      .select(['event_id', 'aggregate_id', 'payload'])
      .orderBy('id')
      .execute()
    expect(rows.map((row) => row.event_id)).toEqual(results.map((result) => result.eventId))
    expect(rows[0]!.aggregate_id).toBe(longKey)
    expect(rows[1]!.payload).toBe(exact)
    expect(rows[2]!.payload).toEqual(lookalike)
    expect(rows[3]!.payload).toBeNull()
    expect(rows[4]!.payload).toBe('abcdefgh')
  })
})
