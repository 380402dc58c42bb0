import { HEADERS } from './headers.js'

/** How far a `webhook-timestamp` may be from the receiver's clock, either way, by default (Standard Webhooks). */
export const DEFAULT_SIGNATURE_TOLERANCE_SECONDS = 300

/** Why a request's signature was refused: by {@link checkSignatureHeaders} or by `verifyWebhook`. */
export type SignatureFailure = 'missing_signature' | 'timestamp_out_of_window' | 'invalid_signature'

/** Options of {@link checkSignatureHeaders} and `verifyWebhook`. */
export interface VerifyOptions {
  /** Accepted clock distance either way. @defaultValue 300 */
  readonly toleranceSeconds?: number
  /** The receiver's clock, for tests. @defaultValue `new Date()` */
  readonly now?: Date
}

/**
 * Headers read through a `get` method: a web `Headers`, or any case-insensitive view of one request's headers.
 *
 * @example
 * ```ts
 * import type { HeaderGetter } from '@outbox/protocol'
 * const headers: HeaderGetter = new Headers({ 'webhook-id': 'msg_1' })
 * ```
 */
export interface HeaderGetter {
  get(name: string): string | null | undefined
}

/**
 * A request's headers as servers hand them over: a record such as Node's `req.headers` (a header sent several
 * times may be an array) or anything with `get(name)`, such as a web `Headers`. Names are matched
 * case-insensitively either way.
 *
 * @example
 * ```ts
 * import type { IncomingHeaders } from '@outbox/protocol'
 * const fromNode: IncomingHeaders = { 'webhook-id': 'msg_1', 'webhook-signature': ['v1,a', 'v1,b'] }
 * const fromWeb: IncomingHeaders = new Headers({ 'Webhook-Id': 'msg_1' })
 * ```
 */
export type IncomingHeaders = Readonly<Record<string, string | readonly string[] | undefined>> | HeaderGetter

type HeaderValue = string | readonly string[] | undefined

function isGetter(headers: IncomingHeaders): headers is HeaderGetter {
  return typeof (headers as HeaderGetter).get === 'function'
}

/** Keeps the strings of a header value; anything else a loosely typed caller passed counts as absent. */
function strings(value: unknown): string[] {
  if (typeof value === 'string') return [value]
  if (Array.isArray(value)) return value.filter((item): item is string => typeof item === 'string')
  return []
}

/**
 * One header, looked up case-insensitively. Node's records have lower-case names already, so this is one property
 * read; only a miss scans the names (a hand-built record such as `{ 'Webhook-Id': … }`).
 */
function readHeader(headers: IncomingHeaders, name: string): HeaderValue {
  if (isGetter(headers)) return headers.get(name) ?? undefined
  const direct = strings(headers[name])
  if (direct.length > 0) return direct.length === 1 ? direct[0] : direct
  const found: string[] = []
  for (const key of Object.keys(headers)) {
    if (key.length === name.length && key.toLowerCase() === name) found.push(...strings(headers[key]))
  }
  if (found.length === 0) return undefined
  return found.length === 1 ? found[0] : found
}

/** A header that must be sent once: several values are as good as none (which one was signed?). */
function single(value: HeaderValue): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined
}

/**
 * The `v1,` entries of `webhook-signature`. Entries are space-separated; a header sent twice arrives as an array
 * (a record) or joined with `, ` (what Node and web `Headers` do), so a trailing comma is cut off an entry. A
 * base64 signature never ends in a comma, so this never changes a real one.
 */
function signatureEntries(value: HeaderValue): string[] {
  const text = typeof value === 'string' ? value : (value ?? []).join(' ')
  const entries: string[] = []
  for (const token of text.split(/\s+/)) {
    const entry = token.replace(/,+$/, '')
    if (entry.startsWith('v1,') && entry.length > 3) entries.push(entry.slice(3))
  }
  return entries
}

/** What the signature headers say, once checked: the signed id and timestamp and the presented `v1` signatures. */
export interface SignatureHeaders {
  readonly id: string
  /** Unix seconds, as sent. */
  readonly timestamp: number
  /** The base64 part of every `v1,` entry. */
  readonly signatures: readonly string[]
}

/**
 * Reads and checks the signature headers; `verifyWebhook` continues from here with the HMAC. Not exported from
 * the package: {@link checkSignatureHeaders} is the public face.
 */
export function readSignatureHeaders(
  headers: IncomingHeaders,
  options: VerifyOptions = {},
): SignatureHeaders | SignatureFailure {
  const id = single(readHeader(headers, HEADERS.webhookId))
  const timestampText = single(readHeader(headers, HEADERS.webhookTimestamp))
  const signatures = signatureEntries(readHeader(headers, HEADERS.webhookSignature))
  if (id === undefined || timestampText === undefined || signatures.length === 0) return 'missing_signature'
  if (!/^\d{1,12}$/.test(timestampText)) return 'timestamp_out_of_window'
  const timestamp = Number(timestampText)
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000)
  const tolerance = options.toleranceSeconds ?? DEFAULT_SIGNATURE_TOLERANCE_SECONDS
  if (Math.abs(now - timestamp) > tolerance) return 'timestamp_out_of_window'
  return { id, timestamp, signatures }
}

/**
 * Checks the Standard Webhooks headers alone, before a byte of the body is read: `webhook-id`,
 * `webhook-timestamp` and `webhook-signature` present, the timestamp unix seconds within the tolerance either
 * way, and at least one `v1,` signature. A receiver that refuses here never spends an HMAC (or a body read) on a
 * request that cannot be authentic; `verifyWebhook` makes the same checks, so calling this first changes no
 * answer.
 *
 * @returns the reason to refuse, or undefined when the headers are fit to verify.
 *
 * @example
 * ```ts
 * import { checkSignatureHeaders } from '@outbox/protocol'
 * import type { IncomingMessage } from 'node:http'
 *
 * function refuseEarly(req: IncomingMessage): boolean {
 *   return checkSignatureHeaders(req.headers) !== undefined // answer 401 and close the connection
 * }
 * ```
 */
export function checkSignatureHeaders(
  headers: IncomingHeaders,
  options: VerifyOptions = {},
): SignatureFailure | undefined {
  const read = readSignatureHeaders(headers, options)
  return typeof read === 'string' ? read : undefined
}
