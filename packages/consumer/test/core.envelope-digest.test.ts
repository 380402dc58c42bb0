import { createHash } from 'node:crypto'
import type { ReceivedEvent } from '@outbox/protocol'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { envelopeDigest } from '../src/core/envelope-digest.js'

/** The canonical text as it was first written (map/filter/join): every digest recorded so far is over it. */
function firstCanonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(firstCanonical).join(',')}]`
  if (typeof value === 'object' && value !== null) {
    const keys = Object.keys(value).sort()
    const members = keys
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .map((key) => `${JSON.stringify(key)}:${firstCanonical((value as Record<string, unknown>)[key])}`)
    return `{${members.join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

function firstDigest(event: ReceivedEvent<unknown>): string {
  const covered = [event.type, event.aggregateType ?? null, event.aggregateId ?? null, event.sequence ?? null]
  return createHash('sha256')
    .update(`${firstCanonical(covered)}\n${firstCanonical(event.data)}`)
    .digest('hex')
}

describe('the payload digest', () => {
  it('is the digest recorded by earlier versions, so a retry across an upgrade is still the same payload', () => {
    const event = {
      eventId: 'e',
      type: 'order.updated',
      aggregateType: 'order',
      aggregateId: '42',
      sequence: 7,
      data: {
        status: 'paid',
        lines: [{ sku: 'a', qty: 2 }, null, 'x'],
        total: 12.5,
        note: undefined,
        ünï: true,
      },
    }
    expect(envelopeDigest(event)).toBe('2d6b9bd516f282ab6729364b2a994238237511c132c415dd7b1bb4fa969eb12e')
    expect(envelopeDigest({ eventId: 'e', type: 'ping', data: null })).toBe(
      'db7427699c9f04cf37bc8b723b038e29cdec5cecf9dd75e0d600eb799e9e7597',
    )
  })

  it('equals the first implementation on any value an envelope reader can produce', () => {
    const event = fc.record({
      eventId: fc.string(),
      type: fc.string(),
      aggregateType: fc.option(fc.string(), { nil: undefined }),
      aggregateId: fc.option(fc.string(), { nil: undefined }),
      sequence: fc.option(fc.integer({ min: 1 }), { nil: undefined }),
      data: fc.oneof(fc.jsonValue(), fc.anything({ withSparseArray: true })),
    })
    fc.assert(
      fc.property(event, (e) => {
        expect(envelopeDigest(e)).toBe(firstDigest(e))
      }),
      { numRuns: 2000 },
    )
  })
})
