import { startSink, useTestDatabase } from '@outbox/test-harness'
import fc from 'fast-check'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { enqueue, Relay } from '../src/index.js'
import { jsonbTextBytes } from '../src/jsonb-size.js'

const t = useTestDatabase()

/** JSON values as a payload may hold them: numbers of every magnitude, strings with escapes and non-ASCII. */
const payload = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.integer(),
    fc.constantFrom(1e300, -1e-300, 5e-324, 1.7976931348623157e308, 1e21, 1e-7, 0.1, -0, 123.456),
    fc.string({ unit: 'grapheme' }).filter((text) => !text.includes('\u0000')),
    fc.string({ unit: fc.constantFrom('"', '\\', '\n', '\t', '\u0001', '\u001f', 'é', '😀', ',', ':') }),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.dictionary(
      fc.string({ maxLength: 8 }).filter((key) => !key.includes('\u0000')),
      tie('value'),
      {
        maxKeys: 5,
      },
    ),
  ),
})).value

describe('the payload size enqueue measures is the size the relay sends', () => {
  it('equals PostgreSQL’s text form of the stored jsonb, for any JSON value', async () => {
    await fc.assert(
      fc.asyncProperty(payload, async (value) => {
        const json = JSON.stringify(value)
        const { rows } = await sql<{
          bytes: number
        }>`SELECT octet_length(${json}::jsonb::text) AS bytes`.execute(t.db)
        expect(jsonbTextBytes(json)).toBe(rows[0]!.bytes)
      }),
      { numRuns: 300 },
    )
  })

  it('an event accepted at the limit goes out with a body whose data is exactly that many bytes', async () => {
    const data = { values: Array.from({ length: 40 }, (_, n) => (n % 2 === 0 ? 1e300 : 'x'.repeat(n))) }
    const limit = jsonbTextBytes(JSON.stringify(data))
    await t.db.transaction().execute((trx) =>
      enqueue(
        trx,
        { aggregateType: 'doc', aggregateId: '1', eventType: 'doc.saved', payload: data },
        {
          maxPayloadBytes: limit,
        },
      ),
    )
    const sink = await startSink()
    try {
      await new Relay({ db: t.db, endpoint: sink.url }).runOnce()
      const body = sink.requests[0]!.body
      const start = body.indexOf('"data":') + '"data":'.length
      expect(Buffer.byteLength(body.slice(start, -1))).toBe(limit)
    } finally {
      await sink.close()
    }
  })
})
