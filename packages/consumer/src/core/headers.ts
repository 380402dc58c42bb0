/**
 * Request headers as any server hands them over: Node's `IncomingHttpHeaders` (a record whose repeated headers may
 * be arrays) or a web `Headers`. Names are matched case-insensitively either way.
 *
 * @example
 * ```ts
 * import type { HeaderInput } from '@outbox/consumer'
 * const fromNode: HeaderInput = { 'content-type': 'application/json', 'webhook-signature': ['v1,a', 'v1,b'] }
 * const fromWeb: HeaderInput = new Headers({ 'Content-Type': 'application/json' })
 * ```
 */
export type HeaderInput = Headers | Readonly<Record<string, string | readonly string[] | number | undefined>>

/**
 * A case-insensitive, read-only view of one request's headers, as verifiers and envelope readers get them. A header
 * sent several times reads as its values joined with `, ` (what Node does for headers it does not know).
 *
 * @example
 * ```ts
 * import type { WebhookHeaders } from '@outbox/consumer'
 * const deliveryId = (headers: WebhookHeaders) => headers.get('X-GitHub-Delivery')
 * ```
 */
export interface WebhookHeaders {
  /** The header's value, or undefined when it was not sent. */
  get(name: string): string | undefined
  /** Every header as a lower-case record (built on first use), for code that wants a plain object. */
  toRecord(): Readonly<Record<string, string>>
}

function joined(value: string | readonly string[] | number | undefined): string | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'string') return value
  if (typeof value === 'number') return String(value)
  return value.join(', ')
}

/** The view over a web `Headers`: it is case-insensitive and joins repeats already. */
class WebHeaders implements WebhookHeaders {
  readonly #headers: Headers
  #record: Record<string, string> | undefined
  constructor(headers: Headers) {
    this.#headers = headers
  }
  get(name: string): string | undefined {
    return this.#headers.get(name) ?? undefined
  }
  toRecord(): Readonly<Record<string, string>> {
    if (this.#record === undefined) {
      const record: Record<string, string> = {}
      for (const [name, value] of this.#headers) record[name] = value
      this.#record = record
    }
    return this.#record
  }
}

/**
 * The view over a record. Node's records already have lower-case names, so a lookup is one property read; only
 * when that misses and the record has a name with upper-case letters (a hand-built record) is a lower-cased copy
 * made, once.
 */
class RecordHeaders implements WebhookHeaders {
  readonly #headers: Readonly<Record<string, string | readonly string[] | number | undefined>>
  #lowered: Record<string, string> | undefined
  /** Whether some name has an upper-case letter; undefined until a lookup first misses. */
  #mixedCase: boolean | undefined
  constructor(headers: Readonly<Record<string, string | readonly string[] | number | undefined>>) {
    this.#headers = headers
  }
  get(name: string): string | undefined {
    const direct = joined(this.#headers[name])
    if (direct !== undefined) return direct
    // A header that was not sent (content-encoding, most of the time) must not copy Node's whole record.
    this.#mixedCase ??= Object.keys(this.#headers).some((key) => key !== key.toLowerCase())
    if (!this.#mixedCase && name === name.toLowerCase()) return undefined
    return this.toRecord()[name.toLowerCase()]
  }
  toRecord(): Readonly<Record<string, string>> {
    if (this.#lowered === undefined) {
      const lowered: Record<string, string> = Object.create(null)
      for (const [name, value] of Object.entries(this.#headers)) {
        const text = joined(value)
        if (text === undefined) continue
        const key = name.toLowerCase()
        lowered[key] = lowered[key] === undefined ? text : `${lowered[key]}, ${text}`
      }
      this.#lowered = lowered
    }
    return this.#lowered
  }
}

/**
 * Wraps headers in a {@link WebhookHeaders} view, or throws a `TypeError` naming what was passed instead.
 *
 * @example
 * ```ts
 * import { webhookHeaders } from '@outbox/consumer'
 * webhookHeaders({ 'Webhook-Id': 'msg_1' }).get('webhook-id') // 'msg_1'
 * ```
 */
export function webhookHeaders(input: HeaderInput): WebhookHeaders {
  if (typeof Headers !== 'undefined' && input instanceof Headers) return new WebHeaders(input)
  if (typeof input === 'object' && input !== null && typeof (input as Headers).get === 'function') {
    // A Headers from another realm or polyfill: it has the same get().
    return new WebHeaders(input as Headers)
  }
  if (typeof input !== 'object' || input === null) {
    throw new TypeError(
      `request.headers must be a record of header values or a Headers object (got ${input === null ? 'null' : typeof input})`,
    )
  }
  return new RecordHeaders(input as Readonly<Record<string, string | readonly string[] | undefined>>)
}
