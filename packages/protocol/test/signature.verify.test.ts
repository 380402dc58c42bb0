import { KeyObject, randomBytes } from 'node:crypto'
import fc from 'fast-check'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import {
  checkSignatureHeaders,
  DEFAULT_SIGNATURE_TOLERANCE_SECONDS,
  HEADERS,
  MIN_SIGNING_SECRET_BYTES,
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
/** Text outside ASCII: two-, three- and four-byte UTF-8 sequences. */
const UNICODE_BODY = '{"event_id":"0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a","data":{"name":"Zoë — 東京 🚚"}}'
const secretOf = (bytes: number) => `whsec_${randomBytes(bytes).toString('base64')}`

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

  it('reads one string with commas as a rotation list, as OUTBOX_SECRET holds it for the relay', () => {
    expect(parseSigningSecrets(`${SECRET},${OTHER}`).map((key) => key.secret)).toEqual([SECRET, OTHER])
    expect(parseSigningSecrets(` ${SECRET} , ${OTHER} `).map((key) => key.secret)).toEqual([SECRET, OTHER])
    // A request signed by the relay with either secret verifies against the same string.
    const headers = signWebhook(parseSigningSecrets(OTHER), { eventId: EVENT_ID, body: BODY })
    expect(verifyWebhook(parseSigningSecrets(`${SECRET},${OTHER}`), headers, BODY)).toEqual({ ok: true })
    // An empty entry is named, as in an array.
    expect(secretError(`${SECRET},`).message).toMatch(/^signing secret #2 must start with "whsec_"/)
  })

  it('decodes each secret once into a node:crypto key of its bytes', () => {
    const [parsed] = parseSigningSecrets(SECRET)
    expect(parsed!.key).toBeInstanceOf(KeyObject)
    expect(parsed!.key.type).toBe('secret')
    expect(parsed!.key.export()).toEqual(Buffer.from(SECRET.slice(6), 'base64'))
  })

  it('refuses a secret shorter than the Standard Webhooks minimum of 24 bytes, and says how to make one', () => {
    expect(MIN_SIGNING_SECRET_BYTES).toBe(24)
    expect(parseSigningSecrets(secretOf(24))).toHaveLength(1)
    expect(parseSigningSecrets(secretOf(64))).toHaveLength(1)
    for (const bytes of [1, 8, 16, 23]) {
      const short = secretOf(bytes)
      const error = secretError(short)
      expect(error.code).toBe('ERR_OUTBOX_INVALID_SECRET')
      expect(error.message).toContain(`is ${bytes} bytes long`)
      expect(error.message).toContain('at least 24')
      expect(error.message).toContain('openssl rand -base64 32')
      expect(error.message).not.toContain(short.slice(6))
    }
    // In a rotation list the short one is named, and the good one does not save it.
    expect(secretError([SECRET, secretOf(16)]).message).toMatch(/^signing secret #2 is 16 bytes long/)
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

describe('signWebhook over bytes', () => {
  it('signs a Uint8Array body as exactly those bytes, the same as its UTF-8 text', () => {
    const keys = parseSigningSecrets(SECRET)
    const at = new Date('2026-12-02T09:00:00Z')
    const bytes = new TextEncoder().encode(UNICODE_BODY)
    const fromText = signWebhook(keys, { eventId: EVENT_ID, body: UNICODE_BODY, timestamp: at })
    const fromBytes = signWebhook(keys, { eventId: EVENT_ID, body: bytes, timestamp: at })
    expect(fromBytes).toEqual(fromText)
    expect(verifyWebhook(keys, fromBytes, bytes, { now: at })).toEqual({ ok: true })
  })

  it('tells apart bodies that differ only in bytes that are not UTF-8', () => {
    // Both decode to the same text ("{\uFFFD}"): a verifier that signs decoded text cannot see the change.
    const keys = parseSigningSecrets(SECRET)
    const at = new Date('2026-12-02T09:00:00Z')
    const sent = Uint8Array.of(0x7b, 0xff, 0x7d)
    const tampered = Uint8Array.of(0x7b, 0xfe, 0x7d)
    expect(Buffer.from(sent).toString()).toBe(Buffer.from(tampered).toString())
    const headers = signWebhook(keys, { eventId: EVENT_ID, body: sent, timestamp: at })
    expect(verifyWebhook(keys, headers, sent, { now: at })).toEqual({ ok: true })
    expect(verifyWebhook(keys, headers, tampered, { now: at })).toEqual({
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

  it('agree both ways on a bytes body outside ASCII', () => {
    const at = new Date()
    const bytes = new TextEncoder().encode(UNICODE_BODY)
    const ours = signWebhook(parseSigningSecrets(SECRET), { eventId: EVENT_ID, body: bytes, timestamp: at })
    expect(new Webhook(SECRET).verify(Buffer.from(bytes), ours)).toEqual(JSON.parse(UNICODE_BODY))
    const theirs = {
      'webhook-id': EVENT_ID,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(SECRET).sign(EVENT_ID, at, Buffer.from(bytes)),
    }
    expect(theirs['webhook-signature']).toBe(ours[HEADERS.webhookSignature])
    expect(verifyWebhook(parseSigningSecrets(SECRET), theirs, bytes, { now: at })).toEqual({ ok: true })
    expect(verifyWebhook(parseSigningSecrets(SECRET), theirs, UNICODE_BODY, { now: at })).toEqual({
      ok: true,
    })
  })

  it('agree both ways for arbitrary ids and bodies', () => {
    const keys = parseSigningSecrets(SECRET)
    const theirs = new Webhook(SECRET)
    fc.assert(
      fc.property(fc.uuid(), fc.json({ stringUnit: 'binary' }), (eventId, body) => {
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

  it('answers missing_signature when a header is absent, or the id or timestamp is sent twice', () => {
    for (const name of [HEADERS.webhookId, HEADERS.webhookTimestamp, HEADERS.webhookSignature]) {
      const { [name]: _dropped, ...rest } = signed
      expect(verifyWebhook(keys, rest, BODY, { now: at })).toEqual({ ok: false, reason: 'missing_signature' })
      expect(verifyWebhook(keys, { ...rest, [name]: '' }, BODY, { now: at })).toEqual({
        ok: false,
        reason: 'missing_signature',
      })
    }
    // Which of two ids or timestamps was signed? Neither is trusted.
    for (const name of [HEADERS.webhookId, HEADERS.webhookTimestamp]) {
      const doubled = { ...signed, [name]: [signed[name]!, signed[name]!] }
      expect(verifyWebhook(keys, doubled, BODY, { now: at })).toEqual({
        ok: false,
        reason: 'missing_signature',
      })
    }
  })

  describe('webhook-signature sent twice', () => {
    const good = signed[HEADERS.webhookSignature]!
    const wrong = signWebhook(parseSigningSecrets(OTHER), { eventId: EVENT_ID, body: BODY, timestamp: at })[
      HEADERS.webhookSignature
    ]!

    it('verifies when any entry matches, as an array or joined with ", " (what Node does)', () => {
      for (const value of [
        [wrong, good],
        [good, wrong],
        `${wrong}, ${good}`,
        `${good}, ${wrong}`,
        `${wrong} v1a,xyz, ${good}`,
        `${wrong},  ${good},`,
      ]) {
        const headers = { ...signed, [HEADERS.webhookSignature]: value }
        expect(verifyWebhook(keys, headers, BODY, { now: at })).toEqual({ ok: true })
        expect(checkSignatureHeaders(headers, { now: at })).toBeUndefined()
      }
    })

    it('still refuses when no entry matches', () => {
      const other = signWebhook(parseSigningSecrets(newSecret()), {
        eventId: EVENT_ID,
        body: BODY,
        timestamp: at,
      })[HEADERS.webhookSignature]!
      for (const value of [[wrong, other], `${wrong}, ${other}`]) {
        const headers = { ...signed, [HEADERS.webhookSignature]: value }
        expect(verifyWebhook(keys, headers, BODY, { now: at })).toEqual({
          ok: false,
          reason: 'invalid_signature',
        })
      }
    })
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
    // Nothing this verifier can check is as good as no signature: refused before any HMAC.
    const onlyOther = { ...signed, [HEADERS.webhookSignature]: `v1a,${v1.slice(3)} v2,abc v1,` }
    expect(verifyWebhook(keys, onlyOther, BODY, { now: at })).toEqual({
      ok: false,
      reason: 'missing_signature',
    })
  })

  it('finds the headers whatever the case of their names, in a record or a Headers', () => {
    const upper = Object.fromEntries(
      Object.entries(signed).map(([name, value]) => [
        name.replace(/(^|-)\w/g, (c) => c.toUpperCase()),
        value,
      ]),
    )
    expect(Object.keys(upper)).toContain('Webhook-Signature')
    expect(verifyWebhook(keys, upper, BODY, { now: at })).toEqual({ ok: true })
    expect(verifyWebhook(keys, new Headers(upper), BODY, { now: at })).toEqual({ ok: true })
    const twice = new Headers(signed)
    twice.append(HEADERS.webhookSignature, 'v1,bm90LXRoZS1zaWduYXR1cmU=')
    expect(verifyWebhook(keys, twice, BODY, { now: at })).toEqual({ ok: true })
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

describe('checkSignatureHeaders', () => {
  const keys = parseSigningSecrets(SECRET)
  const at = new Date('2026-12-02T09:00:00Z')
  const signed = signWebhook(keys, { eventId: EVENT_ID, body: BODY, timestamp: at })

  it('passes well-formed headers without looking at any body or key', () => {
    expect(checkSignatureHeaders(signed, { now: at })).toBeUndefined()
    // Well-formed is not authentic: the signature is only checked by verifyWebhook.
    const forged = { ...signed, [HEADERS.webhookSignature]: 'v1,Zm9yZ2Vk' }
    expect(checkSignatureHeaders(forged, { now: at })).toBeUndefined()
    expect(verifyWebhook(keys, forged, BODY, { now: at })).toEqual({ ok: false, reason: 'invalid_signature' })
  })

  it('refuses what verifyWebhook refuses before the HMAC, for records, Headers and get() views', () => {
    const cases: [Record<string, string>, string][] = [
      [
        { [HEADERS.webhookId]: EVENT_ID, [HEADERS.webhookTimestamp]: signed['webhook-timestamp']! },
        'missing_signature',
      ],
      [{ ...signed, [HEADERS.webhookSignature]: 'v2,abc' }, 'missing_signature'],
      [{ ...signed, [HEADERS.webhookTimestamp]: 'soon' }, 'timestamp_out_of_window'],
      [
        { ...signed, [HEADERS.webhookTimestamp]: String(Number(signed['webhook-timestamp']) - 301) },
        'timestamp_out_of_window',
      ],
      [
        { ...signed, [HEADERS.webhookTimestamp]: String(Number(signed['webhook-timestamp']) + 301) },
        'timestamp_out_of_window',
      ],
    ]
    for (const [record, reason] of cases) {
      const web = new Headers(record)
      const view = { get: (name: string) => web.get(name) ?? undefined }
      for (const headers of [record, web, view]) {
        expect(checkSignatureHeaders(headers, { now: at })).toBe(reason)
        expect(verifyWebhook(keys, headers, BODY, { now: at })).toEqual({ ok: false, reason })
      }
    }
    expect(
      checkSignatureHeaders(signed, { now: new Date(at.getTime() + 61_000), toleranceSeconds: 60 }),
    ).toBe('timestamp_out_of_window')
  })

  it('agrees with verifyWebhook on arbitrary headers: whatever it refuses, verifyWebhook refuses the same way', () => {
    const header = fc.option(
      fc.oneof(
        fc.string(),
        fc.constantFrom(signed['webhook-timestamp']!, signed['webhook-signature']!, 'v1,', 'v1,a, v1,b'),
        fc.array(fc.string(), { maxLength: 2 }),
      ),
      { nil: undefined },
    )
    fc.assert(
      fc.property(header, header, header, (id, timestamp, signature) => {
        const headers = {
          [HEADERS.webhookId]: id,
          [HEADERS.webhookTimestamp]: timestamp,
          [HEADERS.webhookSignature]: signature,
        }
        const early = checkSignatureHeaders(headers, { now: at })
        const verified = verifyWebhook(keys, headers, BODY, { now: at })
        if (early !== undefined) expect(verified).toEqual({ ok: false, reason: early })
        else expect(verified).toEqual({ ok: false, reason: 'invalid_signature' })
      }),
      { numRuns: 300 },
    )
  })
})
