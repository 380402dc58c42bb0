import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_SIGNATURE_TOLERANCE_SECONDS,
  HEADERS,
  ProtocolError,
  parseSigningSecrets,
  signWebhook,
  verifyWebhook,
} from '../src/index.js'

const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`
const SECRET = newSecret()
const OTHER = newSecret()
const EVENT_ID = '0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a'
const BODY = '{"event_id":"0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a","data":{"total":3}}'

function secretError(secrets: unknown): ProtocolError {
  try {
    parseSigningSecrets(secrets as string)
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError)
    return error as ProtocolError
  }
  throw new Error(`parseSigningSecrets accepted ${JSON.stringify(secrets)}`)
}

describe('parseSigningSecrets', () => {
  it('accepts one secret or a rotation list', () => {
    expect(parseSigningSecrets(SECRET)).toHaveLength(1)
    expect(parseSigningSecrets([SECRET, OTHER]).map((key) => key.secret)).toEqual([SECRET, OTHER])
    expect(Object.isFrozen(parseSigningSecrets(SECRET))).toBe(true)
  })

  it.each([
    ['an empty list', []],
    ['a number', 42],
    ['null', null],
    ['a secret without the whsec_ prefix', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
    ['an empty key', 'whsec_'],
    ['a key that is not base64', 'whsec_not base64!'],
    ['unpadded base64', 'whsec_c2VjcmV0'.slice(0, -1)],
    ['misplaced padding', 'whsec_ab=c'],
    ['a bad secret inside a list', [SECRET, 'whsec_%%%%']],
    ['a non-string inside a list', [SECRET, 7]],
  ])('refuses %s with ERR_OUTBOX_INVALID_SECRET', (_label, secrets) => {
    const error = secretError(secrets)
    expect(error.code).toBe('ERR_OUTBOX_INVALID_SECRET')
    expect(error.message).toMatch(/signing secret/)
  })

  it('names the bad entry of a list but never shows a secret', () => {
    const bad = 'whsec_c2VjcmV0LXZhbHVl!'
    const error = secretError([SECRET, bad])
    expect(error.message).toMatch(/#2/)
    expect(error.message).not.toContain(bad.slice(6))
    expect(error.message).not.toContain(SECRET.slice(6))
  })
})

describe('signWebhook', () => {
  it('writes the three Standard Webhooks headers for the attempt time', () => {
    const at = new Date('2026-12-02T09:00:00.750Z')
    const headers = signWebhook(parseSigningSecrets(SECRET), { eventId: EVENT_ID, body: BODY, timestamp: at })
    expect(Object.keys(headers).sort()).toEqual(
      [HEADERS.webhookId, HEADERS.webhookSignature, HEADERS.webhookTimestamp].sort(),
    )
    expect(headers[HEADERS.webhookId]).toBe(EVENT_ID)
    expect(headers[HEADERS.webhookTimestamp]).toBe(String(Math.floor(at.getTime() / 1000)))
    expect(headers[HEADERS.webhookSignature]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
  })

  it('signs once per secret during a rotation, and either secret verifies', () => {
    const headers = signWebhook(parseSigningSecrets([SECRET, OTHER]), { eventId: EVENT_ID, body: BODY })
    const signatures = headers[HEADERS.webhookSignature]!.split(' ')
    expect(signatures).toHaveLength(2)
    expect(signatures[0]).not.toBe(signatures[1])
    expect(verifyWebhook(parseSigningSecrets(SECRET), headers, BODY)).toEqual({ ok: true })
    expect(verifyWebhook(parseSigningSecrets(OTHER), headers, BODY)).toEqual({ ok: true })
    expect(verifyWebhook(parseSigningSecrets(newSecret()), headers, BODY)).toEqual({
      ok: false,
      reason: 'invalid_signature',
    })
  })
})

describe('interoperability with the standardwebhooks package', () => {
  it('its Webhook.verify accepts our headers, for every secret of a rotation', () => {
    const headers = signWebhook(parseSigningSecrets([SECRET, OTHER]), { eventId: EVENT_ID, body: BODY })
    expect(new Webhook(SECRET).verify(BODY, headers)).toEqual(JSON.parse(BODY))
    expect(new Webhook(OTHER).verify(BODY, headers)).toEqual(JSON.parse(BODY))
    expect(() => new Webhook(newSecret()).verify(BODY, headers)).toThrow(/No matching signature/)
  })

  it('our verifyWebhook accepts its sign', () => {
    const at = new Date()
    const headers = {
      'webhook-id': EVENT_ID,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(SECRET).sign(EVENT_ID, at, BODY),
    }
    expect(verifyWebhook(parseSigningSecrets(SECRET), headers, BODY)).toEqual({ ok: true })
    expect(verifyWebhook(parseSigningSecrets([OTHER, SECRET]), headers, BODY)).toEqual({ ok: true })
  })

  it('agree both ways for arbitrary ids and bodies', () => {
    const keys = parseSigningSecrets(SECRET)
    const theirs = new Webhook(SECRET)
    fc.assert(
      fc.property(fc.uuid(), fc.json(), (eventId, body) => {
        const at = new Date()
        const ours = signWebhook(keys, { eventId, body, timestamp: at })
        expect(theirs.verify(body, ours)).toEqual(JSON.parse(body))
        const headers = {
          'webhook-id': eventId,
          'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
          'webhook-signature': theirs.sign(eventId, at, body),
        }
        expect(headers['webhook-signature']).toBe(ours[HEADERS.webhookSignature])
        expect(verifyWebhook(keys, headers, body)).toEqual({ ok: true })
      }),
      { numRuns: 200 },
    )
  })
})

describe('verifyWebhook', () => {
  const keys = parseSigningSecrets(SECRET)
  const at = new Date('2026-12-02T09:00:00Z')
  const signed = signWebhook(keys, { eventId: EVENT_ID, body: BODY, timestamp: at })
  const seconds = (delta: number) => new Date(at.getTime() + delta * 1000)

  it('accepts the exact bytes, as text or as a Uint8Array', () => {
    expect(verifyWebhook(keys, signed, BODY, { now: at })).toEqual({ ok: true })
    expect(verifyWebhook(keys, signed, new TextEncoder().encode(BODY), { now: at })).toEqual({ ok: true })
    const inside = new TextEncoder().encode(`xx${BODY}yy`).subarray(2, 2 + BODY.length)
    expect(verifyWebhook(keys, signed, inside, { now: at })).toEqual({ ok: true })
  })

  it('refuses a tampered body, id or timestamp', () => {
    const refusal = { ok: false, reason: 'invalid_signature' }
    expect(verifyWebhook(keys, signed, BODY.replace('3', '4'), { now: at })).toEqual(refusal)
    expect(verifyWebhook(keys, signed, `${BODY} `, { now: at })).toEqual(refusal)
    const otherId = { ...signed, [HEADERS.webhookId]: '1b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a' }
    expect(verifyWebhook(keys, otherId, BODY, { now: at })).toEqual(refusal)
    const otherTime = {
      ...signed,
      [HEADERS.webhookTimestamp]: String(Number(signed['webhook-timestamp']) + 1),
    }
    expect(verifyWebhook(keys, otherTime, BODY, { now: at })).toEqual(refusal)
  })

  it('refuses a signature made with another secret', () => {
    expect(verifyWebhook(parseSigningSecrets(OTHER), signed, BODY, { now: at })).toEqual({
      ok: false,
      reason: 'invalid_signature',
    })
  })

  it('checks the timestamp window both ways, inclusive of the tolerance', () => {
    const tolerance = DEFAULT_SIGNATURE_TOLERANCE_SECONDS
    expect(tolerance).toBe(300)
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(tolerance) })).toEqual({ ok: true })
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(-tolerance) })).toEqual({ ok: true })
    const outside = { ok: false, reason: 'timestamp_out_of_window' }
    // Expired: the request was signed more than the tolerance ago.
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(tolerance + 1) })).toEqual(outside)
    // From the future: the sender's clock (or an attacker) is ahead.
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(-tolerance - 1) })).toEqual(outside)
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(61), toleranceSeconds: 60 })).toEqual(outside)
    expect(verifyWebhook(keys, signed, BODY, { now: seconds(59), toleranceSeconds: 60 })).toEqual({
      ok: true,
    })
  })

  it('refuses an expired request even when its signature is valid (no replay)', () => {
    const old = signWebhook(keys, { eventId: EVENT_ID, body: BODY, timestamp: seconds(-3600) })
    expect(verifyWebhook(keys, old, BODY, { now: at })).toEqual({
      ok: false,
      reason: 'timestamp_out_of_window',
    })
  })

  it('answers missing_signature when a header is absent or not a single string', () => {
    for (const name of [HEADERS.webhookId, HEADERS.webhookTimestamp, HEADERS.webhookSignature]) {
      const { [name]: _dropped, ...rest } = signed
      expect(verifyWebhook(keys, rest, BODY, { now: at })).toEqual({ ok: false, reason: 'missing_signature' })
      const doubled = { ...signed, [name]: [signed[name]!, signed[name]!] }
      expect(verifyWebhook(keys, doubled, BODY, { now: at })).toEqual({
        ok: false,
        reason: 'missing_signature',
      })
    }
  })

  it('refuses a timestamp that is not unix seconds', () => {
    for (const value of ['soon', '-5', '1.5', '2026-12-02T09:00:00Z', '1'.repeat(13)]) {
      const headers = { ...signed, [HEADERS.webhookTimestamp]: value }
      expect(verifyWebhook(keys, headers, BODY, { now: at })).toEqual({
        ok: false,
        reason: 'timestamp_out_of_window',
      })
    }
  })

  it('skips signatures of unknown versions and finds the v1 one among them', () => {
    const v1 = signed[HEADERS.webhookSignature]!
    const mixed = { ...signed, [HEADERS.webhookSignature]: `v1a,${v1.slice(3)} v2,abc ${v1}` }
    expect(verifyWebhook(keys, mixed, BODY, { now: at })).toEqual({ ok: true })
    const onlyOther = { ...signed, [HEADERS.webhookSignature]: `v1a,${v1.slice(3)}` }
    expect(verifyWebhook(keys, onlyOther, BODY, { now: at })).toEqual({
      ok: false,
      reason: 'invalid_signature',
    })
  })

  it('never throws on arbitrary headers and bodies, and never accepts them', () => {
    const header = fc.option(fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 2 })), {
      nil: undefined,
    })
    fc.assert(
      fc.property(header, header, header, fc.string(), (id, timestamp, signature, body) => {
        const headers = {
          [HEADERS.webhookId]: id,
          [HEADERS.webhookTimestamp]: timestamp,
          [HEADERS.webhookSignature]: signature,
        }
        expect(verifyWebhook(keys, headers, body, { now: at }).ok).toBe(false)
      }),
      { numRuns: 300 },
    )
  })
})
