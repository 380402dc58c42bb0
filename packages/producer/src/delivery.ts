import {
  DELIVERY_STATUSES,
  type DeliveryStatus,
  HEADERS,
  type SigningKey,
  signWebhook,
} from '@outbox/protocol'
import { Agent } from 'undici'
import type { DeliveryTarget } from './delivery-target.js'
import { checkLiteralHost, guardedLookup, PrivateAddressError } from './network-guard.js'
import type { EndpointEvent } from './options.js'
import { parseRetryAfter } from './retry-policy.js'
import type { Clock } from './runtime.js'
import { type AbortableRequest, postWebhook, type WebhookTransport } from './webhook-request.js'

/** How one webhook request ended, as the relay acts on it. */
export type DeliveryOutcome =
  | {
      readonly kind: 'success'
      readonly httpStatus: number
      readonly deliveryStatus: DeliveryStatus | null
      /** The body's first {@link MAX_ANSWER_EXCERPT} characters, for the delivery log. */
      readonly answer: string
    }
  /** 409: the consumer waits for an earlier sequence. Not an attempt. */
  | { readonly kind: 'conflict'; readonly httpStatus: 409; readonly error: string; readonly answer: string }
  /** Cut short because the relay is stopping: not an attempt; the lane is handed back as it is. */
  | { readonly kind: 'aborted' }
  /** Any other answer, a timeout or a network error: an attempt to retry. */
  | {
      readonly kind: 'failure'
      readonly httpStatus: number | null
      readonly error: string
      /** The body's first {@link MAX_ANSWER_EXCERPT} characters when an answer came; absent otherwise. */
      readonly answer?: string
      /** From `Retry-After` on 429/503, already bounded. */
      readonly retryAfterMs?: number
    }

/**
 * What an attempt refused by the network guard records as its error (`last_error`, the delivery log): a subscriber
 * may one day read it, and the guard's own message says which internal name resolves to which address. The relay's
 * log keeps that detail (see `onRefused`).
 */
export const DESTINATION_NOT_ALLOWED = 'destination not allowed'

/** The most parsed URLs a sender keeps (see `WebhookSender#parsed`). */
const MAX_PARSED_URLS = 1024

/** The longest slice of an answer's body kept: as `last_error` of a failure, and in the delivery log. */
export const MAX_ANSWER_EXCERPT = 500

/**
 * What every agent of a sender shares: one request in flight per connection, sockets kept 30 s, and no cap on
 * connections per host. The relay's slot rule bounds its requests in flight; a cap here (it was `concurrency` per
 * host) would queue a subscription's first request, which the rule lets start beside every shared slot taken, behind
 * other subscriptions' unanswered requests to the same host — a hanging endpoint would stall its neighbours again.
 */
const AGENT_OPTIONS = { keepAliveTimeout: 30_000, pipelining: 1 } as const

/**
 * Sends webhooks over a keep-alive undici pool (several times the throughput of `fetch` on the hot path).
 * One instance per relay; `close()` ends its sockets.
 *
 * Restricted targets (stored subscriptions, whose URLs are customer input) go through a second pool, made at their
 * first request, whose connections resolve names with {@link guardedLookup}: a name that resolves to a loopback,
 * private or link-local address is refused at connect time, and an IP literal before sending. A separate pool, so
 * a socket the operator's `endpoint` opened to an internal host is never lent to a customer's URL, and the
 * `endpoint`'s own connections pay for no check at all.
 */
export class WebhookSender {
  readonly #agent: Agent
  /** The pool of restricted targets, made at their first request; undefined until then. */
  #guardedAgent: Agent | undefined
  #guardedTransport: WebhookTransport | undefined
  readonly #keys: readonly SigningKey[]
  /** Called at the first request sent without a signature; undefined once called (or when signing). */
  #onUnsigned: (() => void) | undefined
  readonly #onRefused: ((refusal: PrivateAddressError) => void) | undefined
  readonly #timeoutMs: number
  /** The agent, timeout, clock and tracker every request shares, built once. */
  readonly #transport: WebhookTransport
  /** Requests in flight, so one listener on the caller's `abort` signal cuts them all short. */
  readonly #inFlight = new Set<AbortableRequest>()
  readonly #watched = new WeakSet<AbortSignal>()
  /**
   * URLs parsed so far: a relay posts to one URL per subscription, and parsing one per request is waste. Bounded:
   * cleared when it grows past {@link MAX_PARSED_URLS} (an `endpoint` function may map events to many URLs).
   */
  readonly #parsed = new Map<string, URL>()

  constructor(options: {
    keys: readonly SigningKey[]
    timeoutMs: number
    clock: Clock
    /** Told once, at the first request that goes out unsigned (no keys), so the relay can warn. */
    onUnsigned?: () => void
    /** Told of each attempt the network guard refused, with the detail the stored error leaves out. */
    onRefused?: (refusal: PrivateAddressError) => void
  }) {
    this.#keys = options.keys
    this.#onRefused = options.onRefused
    this.#onUnsigned = options.keys.length === 0 ? options.onUnsigned : undefined
    this.#timeoutMs = options.timeoutMs
    this.#agent = new Agent(AGENT_OPTIONS)
    this.#transport = {
      dispatcher: this.#agent,
      timeoutMs: options.timeoutMs,
      clock: options.clock,
      track: (request) => {
        this.#inFlight.add(request)
        return () => this.#inFlight.delete(request)
      },
    }
  }

  /**
   * POSTs one event; never throws — every way it can end is an outcome. `abort` cuts it short (stop). `target`
   * gives a subscription's own secrets and timeout, in place of the sender's, and whether its URL may only reach
   * public addresses: a refused address is a failed attempt whose error says why and what to do. `traceHeaders`
   * (`traceparent`, `tracestate`) go with the request when the delivery is traced.
   */
  async send(
    url: string,
    event: EndpointEvent,
    body: string,
    abort?: AbortSignal,
    target?: Pick<DeliveryTarget, 'signingKeys' | 'requestTimeoutMs' | 'restricted'>,
    traceHeaders?: Readonly<Record<string, string>>,
  ): Promise<DeliveryOutcome> {
    const restricted = target?.restricted === true
    const parsed = this.#parse(url)
    const keys = target?.signingKeys ?? this.#keys
    const timeoutMs = target?.requestTimeoutMs ?? this.#timeoutMs
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'outbox-relay',
      [HEADERS.idempotencyKey]: event.eventId,
      [HEADERS.eventSequence]: String(event.sequence),
    }
    if (traceHeaders !== undefined) Object.assign(headers, traceHeaders)
    if (keys.length > 0) Object.assign(headers, signWebhook(keys, { eventId: event.eventId, body }))
    else if (this.#onUnsigned !== undefined) {
      const warn = this.#onUnsigned
      this.#onUnsigned = undefined
      try {
        warn()
      } catch {
        // A logger that throws must not turn into a failed delivery: send() never throws.
      }
    }
    if (abort?.aborted) return { kind: 'aborted' }
    if (restricted) {
      // net.connect never calls the guarded lookup for an IP literal: refuse one here, before any socket.
      const refusal = checkLiteralHost(parsed)
      if (refusal) return this.#refused(refusal)
    }
    if (abort) this.#watch(abort)
    const shared = restricted ? this.#guarded() : this.#transport
    const transport = timeoutMs === shared.timeoutMs ? shared : { ...shared, timeoutMs }
    const response = await postWebhook(transport, parsed, headers, body)
    switch (response.kind) {
      case 'aborted':
        return { kind: 'aborted' }
      case 'timed out':
        return { kind: 'failure', httpStatus: null, error: `timed out after ${timeoutMs} ms` }
      case 'network error':
        if (response.error instanceof PrivateAddressError) return this.#refused(response.error)
        return { kind: 'failure', httpStatus: null, error: describeNetworkError(response.error) }
    }
    const { status, body: text } = response
    const answer = text.length > MAX_ANSWER_EXCERPT ? text.slice(0, MAX_ANSWER_EXCERPT) : text
    if (status >= 200 && status < 300)
      return { kind: 'success', httpStatus: status, deliveryStatus: readStatus(text), answer }
    const error = `HTTP ${status}: ${answer}`
    if (status === 409) return { kind: 'conflict', httpStatus: 409, error, answer }
    const retryAfterMs = status === 429 || status === 503 ? parseRetryAfter(response.retryAfter) : undefined
    return retryAfterMs === undefined
      ? { kind: 'failure', httpStatus: status, error, answer }
      : { kind: 'failure', httpStatus: status, error, answer, retryAfterMs }
  }

  /** A refused attempt: the generic error for the stored outcome, the detail for the relay's log. */
  #refused(refusal: PrivateAddressError): DeliveryOutcome {
    try {
      this.#onRefused?.(refusal)
    } catch {
      // A logger that throws must not turn into anything but the failed attempt: send() never throws.
    }
    return { kind: 'failure', httpStatus: null, error: DESTINATION_NOT_ALLOWED }
  }

  /** The restricted targets' transport, its pool made now if this is their first request. */
  #guarded(): WebhookTransport {
    if (this.#guardedTransport === undefined) {
      this.#guardedAgent = new Agent({
        ...AGENT_OPTIONS,
        // net.connect calls this for every DNS name (never for an IP literal: send checks those).
        connect: { lookup: guardedLookup },
      })
      this.#guardedTransport = { ...this.#transport, dispatcher: this.#guardedAgent }
    }
    return this.#guardedTransport
  }

  #parse(url: string): URL {
    let parsed = this.#parsed.get(url)
    if (parsed === undefined) {
      if (this.#parsed.size >= MAX_PARSED_URLS) this.#parsed.clear()
      parsed = new URL(url)
      this.#parsed.set(url, parsed)
    }
    return parsed
  }

  #watch(abort: AbortSignal): void {
    if (this.#watched.has(abort)) return
    this.#watched.add(abort)
    abort.addEventListener(
      'abort',
      () => {
        for (const request of this.#inFlight) request.abort()
      },
      { once: true },
    )
  }

  /** Requests waiting for an answer right now. */
  get inFlight(): number {
    return this.#inFlight.size
  }

  /** Cuts every request in flight short (their outcome is `aborted`). */
  abortAll(): void {
    for (const request of this.#inFlight) request.abort()
  }

  /** Ends the sockets of both pools. */
  async close(): Promise<void> {
    await Promise.all([this.#agent.close(), this.#guardedAgent?.close()])
  }
}

/** How a `dedupe` answer begins (see {@link readStatus}). */
const STATUS_PREFIX = '{"status":"'
const EVENT_ID_FIELD = ',"eventId":"'
const KNOWN_STATUSES: ReadonlySet<string> = new Set(DELIVERY_STATUSES)

/**
 * The `status` a 2xx answer's JSON body names, when it is one of {@link DELIVERY_STATUSES}.
 *
 * `dedupe`'s answers — `{"status":"applied","eventId":"…"}`, or the status alone — are recognised by their text
 * before any `JSON.parse`, which at every delivery was a measurable part of the relay's thread; anything else
 * (other fields, another order, escapes in the id, whitespace) is parsed.
 */
function readStatus(text: string): DeliveryStatus | null {
  if (text.startsWith(STATUS_PREFIX)) {
    const end = text.indexOf('"', STATUS_PREFIX.length)
    const status = text.slice(STATUS_PREFIX.length, end)
    if (KNOWN_STATUSES.has(status) && isDedupeTail(text, end + 1)) return status as DeliveryStatus
  }
  if (!text.includes('"status"')) return null
  try {
    const status = (JSON.parse(text) as { status?: unknown }).status
    return typeof status === 'string' && KNOWN_STATUSES.has(status) ? (status as DeliveryStatus) : null
  } catch {
    return null
  }
}

/** Whether `text` from `from` on is `}` or `,"eventId":"<id>"}` with nothing in the id that JSON would escape. */
function isDedupeTail(text: string, from: number): boolean {
  if (text.length === from + 1) return text.charCodeAt(from) === 0x7d
  if (!text.startsWith(EVENT_ID_FIELD, from) || !text.endsWith('"}')) return false
  const id = text.slice(from + EVENT_ID_FIELD.length, -2)
  // A character JSON must escape (a quote, a backslash, a control character): left to `JSON.parse`.
  for (let i = 0; i < id.length; i++) {
    const code = id.charCodeAt(i)
    if (code < 0x20 || code === 0x22 || code === 0x5c) return false
  }
  return true
}

function describeNetworkError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code ?? (error.cause as { code?: unknown } | undefined)?.code
    return typeof code === 'string' ? `${code}: ${error.message}` : error.message
  }
  return String(error)
}
