import { describe, expect, it } from 'vitest'
import {
  CONTENT_TYPE_JSON,
  CONTENT_TYPE_PROBLEM,
  DELIVERY_STATUSES,
  HEADERS,
  PROBLEM_TYPE_BASE,
  PROBLEMS,
  type ProblemCode,
  problem,
} from '../src/index.js'

// The statuses the relay acts on (DESIGN.md, "Responses the relay understands"): changing one changes how the
// relay treats a consumer's answer, so they are pinned here.
const EXPECTED_STATUS: Record<ProblemCode, number> = {
  unsupported_media_type: 415,
  payload_too_large: 413,
  request_timeout: 408,
  server_busy: 503,
  missing_signature: 401,
  invalid_signature: 401,
  timestamp_out_of_window: 401,
  malformed_json: 400,
  invalid_envelope: 400,
  idempotency_key_mismatch: 400,
  sequence_header_mismatch: 400,
  sequence_gap: 409,
  handler_failed: 500,
  body_already_parsed: 500,
  method_not_allowed: 405,
  invalid_payload: 422,
}

describe('problem', () => {
  it.each(Object.entries(EXPECTED_STATUS))('%s answers %i with an RFC 9457 document', (code, status) => {
    const body = problem(code as ProblemCode, 'what happened')
    expect(body).toEqual({
      type: `${PROBLEM_TYPE_BASE}${code}`,
      title: PROBLEMS[code as ProblemCode].title,
      status,
      code,
      detail: 'what happened',
    })
    expect(body.title).toMatch(/^[A-Z]/)
  })

  it('has exactly the pinned codes', () => {
    expect(Object.keys(PROBLEMS).sort()).toEqual(Object.keys(EXPECTED_STATUS).sort())
  })

  it('keeps extensions but never lets them override the standard members', () => {
    const body = problem('sequence_gap', 'expected 3, got 5', {
      expected: 3,
      received: 5,
      status: 200,
      code: 'applied',
      type: 'about:blank',
      title: 'fine',
      detail: 'nothing',
    })
    expect(body).toMatchObject({
      expected: 3,
      received: 5,
      status: 409,
      code: 'sequence_gap',
      type: `${PROBLEM_TYPE_BASE}sequence_gap`,
      title: 'Waiting for an earlier sequence',
      detail: 'expected 3, got 5',
    })
  })

  it('writes the standard members first, so a copy cut short still names the problem', () => {
    const body = problem('invalid_payload', 'the data does not fit', { errors: ['x'.repeat(1000)] })
    expect(Object.keys(body)).toEqual(['type', 'title', 'status', 'code', 'detail', 'errors'])
    expect(JSON.stringify(body).slice(0, 200)).toContain('"code":"invalid_payload"')
  })

  it('survives a JSON round trip unchanged', () => {
    const body = problem('invalid_envelope', 'bad', { errors: ['sequence must be a positive integer'] })
    expect(JSON.parse(JSON.stringify(body))).toEqual(body)
  })

  it('cannot be altered at run time', () => {
    expect(Object.isFrozen(PROBLEMS)).toBe(true)
    expect(Object.isFrozen(DELIVERY_STATUSES)).toBe(true)
    expect(Object.isFrozen(HEADERS)).toBe(true)
  })
})

describe('wire constants', () => {
  it('match the contract', () => {
    expect(HEADERS).toEqual({
      idempotencyKey: 'x-idempotency-key',
      eventSequence: 'x-event-sequence',
      webhookId: 'webhook-id',
      webhookTimestamp: 'webhook-timestamp',
      webhookSignature: 'webhook-signature',
    })
    expect(CONTENT_TYPE_JSON).toBe('application/json')
    expect(CONTENT_TYPE_PROBLEM).toBe('application/problem+json')
    expect([...DELIVERY_STATUSES]).toEqual(['applied', 'duplicate_ignored', 'stale_ignored'])
  })
})
