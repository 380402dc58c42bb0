/**
 * Stable problem codes of consumer answers, with their HTTP status. The relay reads only the status; people and
 * dashboards read the code.
 */
export const PROBLEMS = Object.freeze({
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  request_timeout: { status: 408, title: 'Request body too slow' },
  missing_signature: { status: 401, title: 'Missing signature' },
  invalid_signature: { status: 401, title: 'Invalid signature' },
  timestamp_out_of_window: { status: 401, title: 'Timestamp out of window' },
  malformed_json: { status: 400, title: 'Malformed JSON' },
  invalid_envelope: { status: 400, title: 'Invalid envelope' },
  idempotency_key_mismatch: { status: 400, title: 'Idempotency key mismatch' },
  sequence_header_mismatch: { status: 400, title: 'Sequence header mismatch' },
  invalid_payload: { status: 422, title: 'Invalid payload' },
  sequence_gap: { status: 409, title: 'Waiting for an earlier sequence' },
  handler_failed: { status: 500, title: 'Handler failed' },
  body_already_parsed: { status: 500, title: 'Body already parsed' },
  server_busy: { status: 503, title: 'Too many bodies in transit' },
} as const)

/** One of the stable problem codes. */
export type ProblemCode = keyof typeof PROBLEMS

/** An RFC 9457 problem document with the outbox `code` extension. */
export interface ProblemDetails {
  readonly type: string
  readonly title: string
  readonly status: number
  readonly code: ProblemCode
  readonly detail: string
  readonly [extension: string]: unknown
}

/** Base URI of problem `type`s; each code gets its own fragment. */
export const PROBLEM_TYPE_BASE = 'https://outbox.dev/problems/'

/**
 * Builds the problem document for a code.
 *
 * @example
 * ```ts
 * import { problem } from '@outbox/protocol'
 * const body = problem('sequence_gap', 'expected sequence 3, got 5', { expected: 3 })
 * // body.status === 409
 * ```
 */
export function problem(
  code: ProblemCode,
  detail: string,
  extensions: Record<string, unknown> = {},
): ProblemDetails {
  const { status, title } = PROBLEMS[code]
  const standard = { type: `${PROBLEM_TYPE_BASE}${code}`, title, status, code, detail }
  // Standard members first, so a copy cut short (the relay keeps the first 500 characters as a dead letter's
  // last error) still says which problem it was; an extension never overrides them.
  const body: Record<string, unknown> = { ...standard }
  for (const [name, value] of Object.entries(extensions))
    if (!Object.hasOwn(standard, name)) body[name] = value
  return body as ProblemDetails
}

/** The `status` values in a 2xx answer body of a consumer. */
export type DeliveryStatus = 'applied' | 'duplicate_ignored' | 'stale_ignored'

/** Every {@link DeliveryStatus}, for validation. */
export const DELIVERY_STATUSES: readonly DeliveryStatus[] = Object.freeze([
  'applied',
  'duplicate_ignored',
  'stale_ignored',
])
