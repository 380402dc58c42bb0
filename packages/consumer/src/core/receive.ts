import { type EventHub, HEADERS, type ReceivedEvent } from '@outbox/protocol'
import type { Transaction } from 'kysely'
import { type ApplyOutcome, createApplyEvent, HandlerFailure } from '../apply-event.js'
import { OutboxError } from '../errors.js'
import { consoleLogger, safeLog } from '../logger.js'
import type { ResolvedConsumerOptions } from '../options.js'
import { type PayloadCheck, validatePayload } from '../payload-schemas.js'
import type { ReceiptEventMap, ReceiptRef } from '../receipt-events.js'
import {
  deliveredResponse,
  problemResponse,
  type Refusal,
  refusal,
  type WebhookResponse,
} from '../respond.js'
import { createAggregatedLog } from './aggregated-log.js'
import type { BodyGate } from './body-gate.js'
import { envelopeDigest } from './envelope-digest.js'
import { checkReceivedEvent, type EnvelopeResult, isEnvelopeRefusal } from './envelope-reader.js'
import { type HeaderInput, type WebhookHeaders, webhookHeaders } from './headers.js'
import { type BodySource, readBody } from './read-body.js'
import { describeReceipt, traceReceipts } from './tracing.js'
import { SIGNATURE_DETAILS, type VerifyFailure } from './verifier.js'

/**
 * One webhook request as any server can describe it: what `consumer.handle` takes. `body` is the raw bytes
 * already read, or a source the consumer reads itself (see {@link BodySource}) — only after the headers passed
 * every check, and never past `maxBodyBytes`.
 *
 * @example
 * ```ts
 * import type { WebhookRequest } from '@outbox/consumer'
 * const request: WebhookRequest = {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json' },
 *   body: new TextEncoder().encode('{}'),
 * }
 * ```
 */
export interface WebhookRequest {
  readonly method: string
  readonly headers: HeaderInput
  readonly body?: BodySource | null | undefined
}

/** The application's code for one event, run in the transaction that records it; see `consumer.handle`. */
export type Run = (trx: Transaction<any>) => unknown

/** How an adapter calls the core for one request. */
export interface Receipt<TReq> {
  /** The adapter's own request object: the handler's third argument and `onError`'s second. */
  readonly context: TReq
  /** The handler, bound to nothing yet: the core calls it with the event, the transaction and `context`. */
  readonly handler: (event: any, trx: Transaction<any>, req: TReq) => unknown
  /** The adapter's own `onError`, called after the consumer's. */
  readonly onError?: ((refused: Refusal, req: TReq) => void) | undefined
  /** Set by an adapter that can tell the body is gone (Express after a JSON parser): answered as is. */
  readonly mountingProblem?: Refusal | undefined
}

/** The core of every adapter: one request in, one answer out. */
export type Receive = <TReq>(request: WebhookRequest, receipt: Receipt<TReq>) => Promise<WebhookResponse>

/** What a refusal needs to know of the request it answers. */
interface RequestState {
  readonly headers: WebhookHeaders
  readonly receipt: Receipt<any>
  readonly started: number
  /** Whether the body is (still) on the wire: a refusal then closes the connection. */
  unread: boolean
}

const BODY_CONSUMED =
  'the request body was already read before the consumer (by a body parser or another middleware); the ' +
  'signature covers the exact raw bytes, so mount the consumer where nothing reads the body first'

const UNSUPPORTED_ENCODING = 'content-encoding is not supported; send the body uncompressed'

/**
 * Why a `content-type` is refused, or undefined when it is JSON in UTF-8. Only `application/json` is accepted
 * (with any `+json` structured suffix); a charset other than UTF-8 is refused rather than guessed at, since the
 * signature covers bytes.
 */
export function contentTypeProblem(header: string | undefined): string | undefined {
  if (header === 'application/json') return undefined // what the relay sends: skip the parsing below
  if (header === undefined || header.trim() === '') {
    return 'the content-type header is missing; send application/json'
  }
  const [mediaType = '', ...parameters] = header.split(';')
  const type = mediaType.trim().toLowerCase()
  if (type !== 'application/json' && !/^application\/[a-z0-9.+-]+\+json$/.test(type)) {
    return 'the content-type must be application/json'
  }
  for (const parameter of parameters) {
    const [name = '', value = ''] = parameter.split('=')
    if (name.trim().toLowerCase() !== 'charset') continue
    const charset = value
      .trim()
      .replace(/^"(.*)"$/, '$1')
      .toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') return 'the charset must be utf-8'
  }
  return undefined
}

function isBodySource(body: unknown): boolean {
  if (body === undefined || body === null || body instanceof Uint8Array) return true
  if (typeof body !== 'object') return false
  return (
    typeof (body as ReadableStream).getReader === 'function' ||
    typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  )
}

function describe(error: unknown): Record<string, unknown> | string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    return {
      name: error.name,
      message: error.message,
      ...(code === undefined ? {} : { code }),
      stack: error.stack,
    }
  }
  return String(error)
}

function eventFields(event: ReceivedEvent<unknown>) {
  return {
    eventId: event.eventId,
    eventType: event.type,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    sequence: event.sequence,
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * Builds the core for one consumer: every check, the transaction and every answer live here, once; the adapters
 * only translate their server's request and response.
 *
 * Per request, in this order (each refusal answered at once, nothing recorded):
 * 1. method POST (405 with `Allow`), the adapter's mounting problem (Express after a JSON parser: 500);
 * 2. transport, on headers alone: JSON content type (415), no compression (415), an announced length within
 *    `maxBodyBytes` (413);
 * 3. the verifier's header check (401) — still before a byte of the body is read;
 * 4. the body, in one of `maxConcurrentBodies` reading slots (all taken: 503 `server_busy` with `Retry-After`),
 *    within `bodyTimeoutMs` (408 `request_timeout` when it has not all arrived by then), read up to
 *    `maxBodyBytes` (413 the moment it passes; 500 `body_already_parsed` when something
 *    else read it first);
 * 5. the signature over the exact bytes (401); JSON (400); the envelope and, for this project's relay, the
 *    id and sequence headers (400); what the sequence policy needs (400); the payload schema (422);
 * 6. the transaction: record the id (duplicate → `200 duplicate_ignored`), judge and advance the cursor
 *    (`stale_ignored`, or 409 `sequence_gap` under `'strict'`), run the handler → `200 applied`; a handler or
 *    database failure rolls everything back → 500 `handler_failed`, retried by the sender.
 * Any refusal answered before the body was fully read asks the server to close the connection. A refusal (4xx) is
 * logged at `debug` per request and at `warn` once per code per `logIntervalMs`, with a count.
 */
export function createReceive(
  options: ResolvedConsumerOptions,
  hub: EventHub<ReceiptEventMap>,
  gate: BodyGate,
): Receive {
  const { logger, source, verifier, envelope, maxBodyBytes, bodyTimeoutMs, sequence: policy } = options
  // A flood of refusals (an unauthenticated client in a loop) is one warn line per code per interval, counted.
  const aggregated = createAggregatedLog(logger, options.logIntervalMs)
  const readOptions = {
    limitBytes: maxBodyBytes,
    timeoutMs: bodyTimeoutMs,
    onBytes: gate.count,
    pace: gate.pace,
  }
  const applyEvent = createApplyEvent(options)
  // The default logger drops debug lines: then the per-delivery outcome line is not even built.
  const logsOutcomes = logger.debug !== consoleLogger.debug
  const ordered = policy !== 'off'

  // The id a refusal is logged under when the body was never read: our relay's, then Standard Webhooks',
  // Svix's and GitHub's delivery id headers.
  const headerEventId = (headers: WebhookHeaders) =>
    headers.get(HEADERS.idempotencyKey) ??
    headers.get(HEADERS.webhookId) ??
    headers.get('svix-id') ??
    headers.get('x-github-delivery')

  // Answers a refusal: logged, reported to onError and the receipt events, and the connection closed while the
  // body is unread. Made once per consumer, not per request: only the request's own state is passed in.
  const refuse = (request: RequestState, refused: Refusal): WebhookResponse => {
    const withId =
      refused.eventId === undefined ? { ...refused, eventId: headerEventId(request.headers) } : refused
    // Too many bodies at once is load, not a failure of ours: logged and reported with the refusals.
    const failed = withId.status >= 500 && withId.code !== 'server_busy'
    const meta = {
      status: withId.status,
      code: withId.code,
      detail: withId.detail,
      source,
      eventId: withId.eventId,
      aggregateType: withId.aggregateType,
      aggregateId: withId.aggregateId,
      sequence: withId.sequence,
      ...(withId.cause === undefined ? {} : { error: describe(withId.cause) }),
    }
    if (failed) safeLog(logger, 'error', meta, `webhook refused: ${withId.code}`)
    else {
      safeLog(logger, 'debug', meta, 'webhook request refused')
      const summary = { status: withId.status, code: withId.code, detail: withId.detail, source }
      aggregated('warn', withId.code, summary, `webhook refused: ${withId.code}`)
    }
    for (const onError of [options.onError, request.receipt.onError]) {
      if (onError === undefined) continue
      try {
        onError(withId, request.receipt.context as never)
      } catch (error) {
        safeLog(logger, 'error', { error: describe(error) }, 'onError threw; the refusal is answered anyway')
      }
    }
    const name = failed ? 'receipt:failed' : 'receipt:refused'
    if (hub.has(name)) {
      const ref: ReceiptRef = {
        source,
        eventId: withId.eventId,
        eventType: withId.eventType,
        aggregateType: withId.aggregateType,
        aggregateId: withId.aggregateId,
        sequence: withId.sequence,
      }
      const common = { ...ref, status: withId.status, code: withId.code, detail: withId.detail }
      const durationMs = performance.now() - request.started
      if (failed) hub.emit('receipt:failed', { ...common, error: withId.cause, durationMs })
      else hub.emit('receipt:refused', { ...common, durationMs })
    }
    return problemResponse(withId, request.unread)
  }

  const tooLarge = () =>
    refusal('payload_too_large', `the body is larger than the limit of ${maxBodyBytes} bytes`, {
      extensions: { limitBytes: maxBodyBytes },
    })

  const receive: Receive = async function receive<TReq>(
    request: WebhookRequest,
    receipt: Receipt<TReq>,
  ): Promise<WebhookResponse> {
    const started = performance.now()
    if (typeof request !== 'object' || request === null || typeof request.method !== 'string') {
      throw new TypeError('consumer.handle: pass a request { method, headers, body }')
    }
    if (!isBodySource(request.body)) {
      throw new TypeError(
        'consumer.handle: request.body must be a Uint8Array, an async iterable of chunks or a ReadableStream',
      )
    }
    const headers = webhookHeaders(request.headers)
    const state: RequestState = {
      headers,
      receipt,
      started,
      // Until the body is read, a refusal leaves it on the wire: the connection must close.
      unread: request.body !== null && request.body !== undefined && !(request.body instanceof Uint8Array),
    }

    if (request.method !== 'POST' && request.method.toUpperCase() !== 'POST') {
      return refuse(state, refusal('method_not_allowed', 'webhooks are delivered with POST'))
    }
    if (receipt.mountingProblem !== undefined) return refuse(state, receipt.mountingProblem)

    const typeProblem = contentTypeProblem(headers.get('content-type'))
    if (typeProblem !== undefined) return refuse(state, refusal('unsupported_media_type', typeProblem))
    const encoding = headers.get('content-encoding')?.trim().toLowerCase()
    if (encoding !== undefined && encoding !== '' && encoding !== 'identity') {
      return refuse(state, refusal('unsupported_media_type', UNSUPPORTED_ENCODING))
    }
    const announced = headers.get('content-length')
    if (announced !== undefined && /^\d+$/.test(announced) && Number(announced) > maxBodyBytes) {
      return refuse(state, tooLarge())
    }

    // Authenticity before the body: a forger without the headers gets 401 and a closed connection, unread.
    // The clock is read only for a verifier (unsigned consumers never need it).
    const now = verifier === undefined ? undefined : new Date()
    if (verifier?.checkHeaders !== undefined && now !== undefined) {
      const failure = verifier.checkHeaders(headers, now)
      if (failure !== undefined) return refuse(state, refusal(failure, SIGNATURE_DETAILS[failure]))
    }

    // A streamed body takes one of the consumer's reading slots: past them, the request is turned away unread, so
    // what bodies in transit hold stays within maxBodyBytes × maxConcurrentBodies however many clients trickle.
    const streamed = state.unread
    if (streamed && !gate.enter()) {
      return refuse(
        state,
        refusal(
          'server_busy',
          `${options.maxConcurrentBodies} request bodies are being read already; retry shortly`,
        ),
      )
    }
    let read: Awaited<ReturnType<typeof readBody>>
    try {
      read = await readBody(request.body, readOptions)
    } finally {
      if (streamed) gate.leave()
    }
    if (!read.ok) {
      if (read.reason === 'timeout') {
        return refuse(
          state,
          refusal('request_timeout', `the body did not arrive within ${bodyTimeoutMs} ms`, {
            extensions: { timeoutMs: bodyTimeoutMs },
          }),
        )
      }
      if (read.reason === 'too_large') {
        state.unread = read.unread
        return refuse(state, tooLarge())
      }
      if (read.reason === 'consumed') {
        return refuse(
          state,
          refusal('body_already_parsed', BODY_CONSUMED, {
            cause: new OutboxError('ERR_OUTBOX_BODY_ALREADY_PARSED', BODY_CONSUMED),
          }),
        )
      }
      safeLog(logger, 'debug', { source }, 'webhook aborted by the client while sending its body')
      return problemResponse(
        refusal('invalid_envelope', 'the request body ended before it was complete'),
        true,
      )
    }
    state.unread = false
    const body = read.body

    if (verifier !== undefined) {
      let failure: VerifyFailure | undefined
      try {
        failure = await verifier.verify(headers, body, now ?? new Date())
      } catch (error) {
        return refuse(
          state,
          refusal('handler_failed', 'the signature could not be checked; retry later', { cause: error }),
        )
      }
      if (failure !== undefined) return refuse(state, refusal(failure, SIGNATURE_DETAILS[failure]))
    }

    let json: unknown
    try {
      json = JSON.parse(utf8.decode(body))
    } catch {
      return refuse(
        state,
        refusal('malformed_json', 'the body is not valid UTF-8 JSON', {
          extensions: { errors: ['the body is not valid UTF-8 JSON'] },
        }),
      )
    }

    let parsed: EnvelopeResult
    try {
      parsed = envelope(json, headers)
    } catch (error) {
      return refuse(
        state,
        refusal('handler_failed', 'the envelope reader threw; retry later', { cause: error }),
      )
    }
    if (isEnvelopeRefusal(parsed)) {
      return refuse(
        state,
        refusal(parsed.code ?? 'invalid_envelope', parsed.errors.join('; '), {
          ...(parsed.event === undefined ? {} : eventFields(parsed.event)),
          extensions: { errors: parsed.errors },
        }),
      )
    }
    let event = parsed
    describeReceipt(event)
    if (envelope !== options.defaultEnvelope) {
      const errors = checkReceivedEvent(event)
      if (errors.length > 0) {
        return refuse(state, refusal('invalid_envelope', errors.join('; '), { extensions: { errors } }))
      }
    }
    if (
      ordered &&
      (event.aggregateType === undefined || event.aggregateId === undefined || event.sequence === undefined)
    ) {
      const detail = `this consumer orders events per aggregate (sequence: '${policy}'), but the event has no aggregate or sequence; a sender without them needs sequence: 'off'`
      return refuse(
        state,
        refusal('invalid_envelope', detail, { ...eventFields(event), extensions: { errors: [detail] } }),
      )
    }

    // Over the event as the reader produced it, before a schema may transform its data (see envelope-digest.ts).
    const digest = envelopeDigest(event)

    if (options.schemas !== undefined) {
      let checked: PayloadCheck
      try {
        checked = await validatePayload(options.schemas, event.type, event.data)
      } catch (error) {
        // A schema that throws is the application's bug, not the sender's: answer as a handler failure, so the
        // sender retries once the schema is fixed.
        return refuse(
          state,
          refusal('handler_failed', 'the payload schema threw; nothing was recorded, retry later', {
            ...eventFields(event),
            cause: error,
          }),
        )
      }
      if (checked.ok) event = { ...event, data: checked.data }
      else {
        return refuse(
          state,
          refusal(
            'invalid_payload',
            `the data of this ${JSON.stringify(event.type)} event does not fit its schema: ${checked.issues.join('; ')}`,
            {
              ...eventFields(event),
              extensions: { errors: checked.issues },
            },
          ),
        )
      }
    }

    let handlerMs = 0
    let outcome: ApplyOutcome
    try {
      outcome = await applyEvent(
        event,
        async (trx) => {
          const handlerStarted = performance.now()
          try {
            return await receipt.handler(event, trx, receipt.context)
          } finally {
            handlerMs = performance.now() - handlerStarted
          }
        },
        digest,
      )
    } catch (error) {
      const handlerThrew = error instanceof HandlerFailure
      return refuse(
        state,
        refusal(
          'handler_failed',
          handlerThrew
            ? 'the handler failed; nothing was recorded, retry later'
            : 'the event could not be recorded (database error); nothing was recorded, retry later',
          { ...eventFields(event), cause: handlerThrew ? error.cause : error },
        ),
      )
    }
    if (outcome.kind === 'gap') {
      return refuse(
        state,
        refusal('sequence_gap', `waiting for sequence ${outcome.expected} of this aggregate first`, {
          ...eventFields(event),
          extensions: { expected: outcome.expected, received: event.sequence },
        }),
      )
    }
    if (logsOutcomes) {
      const fields = {
        source,
        ...eventFields(event),
        status: outcome.status,
        ...(outcome.cursor === undefined ? {} : { cursor: outcome.cursor }),
      }
      safeLog(logger, 'debug', fields, `webhook ${outcome.status}`)
    }
    const durationMs = performance.now() - started
    if (outcome.status === 'applied') {
      if (hub.has('receipt:applied')) {
        hub.emit('receipt:applied', { source, ...eventFields(event), handlerMs, durationMs })
      }
    } else if (outcome.status === 'duplicate_ignored') {
      const payloadMismatch = outcome.payloadMismatch === true
      if (payloadMismatch) {
        // Answered as a duplicate all the same (a retry would not change it), but never silently: the same id with
        // another payload is a sender's bug or a reused id, and the second payload was NOT applied.
        aggregated(
          'warn',
          'payload_mismatch',
          { source, ...eventFields(event) },
          'webhook id repeated with another payload: answered duplicate_ignored, the new payload was not applied',
        )
      }
      if (hub.has('receipt:duplicate'))
        hub.emit('receipt:duplicate', { source, ...eventFields(event), payloadMismatch, durationMs })
    } else if (hub.has('receipt:stale')) {
      hub.emit('receipt:stale', { source, ...eventFields(event), cursor: outcome.cursor, durationMs })
    }
    return deliveredResponse(outcome.status, event.eventId)
  }
  // With OpenTelemetry, each request runs in a span continuing the sender's trace (see ./tracing.ts).
  return traceReceipts(receive)
}
