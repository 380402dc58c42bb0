import {
  HEADERS,
  type JsonValue,
  type OutboxEvent,
  parseEnvelope,
  type SignatureFailure,
  verifyWebhook,
} from '@outbox/protocol'
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import { type ApplyOutcome, createApplyEvent, type DedupeHandler, HandlerFailure } from './apply-event.js'
import { OutboxError } from './errors.js'
import { consoleLogger, safeLog } from './logger.js'
import { type ConsumerOptions, type ResolvedConsumerOptions, resolveConsumerOptions } from './options.js'
import { contentTypeProblem, isBodyConsumed, readRawBody } from './read-body.js'
import { type Refusal, refusal, respondDelivered, respondProblem } from './respond.js'

/**
 * What {@link createConsumer} returns: the `dedupe` wrapper, bound to one database and one set of checked options.
 *
 * @example
 * ```ts
 * import { type Consumer, createConsumer } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
 * const consumer: Consumer = createConsumer({ db, secret: process.env.WEBHOOK_SECRET })
 * const onEvent = consumer.dedupe(async (event) => console.log(event.type, event.sequence))
 * ```
 */
export interface Consumer<DB = any> {
  /**
   * Wraps a handler into one Express request handler that authenticates, validates, dedupes and orders each
   * webhook, and runs the handler in the same transaction that records the event id. Mount it with nothing that
   * reads the body in front of it. `TData` types `event.data`; it is not checked at run time.
   */
  dedupe<TData = JsonValue>(handler: DedupeHandler<TData, DB>): RequestHandler
}

const MOUNTING_HELP =
  'the request body was already read by another middleware (e.g. express.json()); signatures need the exact raw ' +
  "bytes, so mount dedupe without a JSON parser in front of it, or before the parser: app.post('/hooks', " +
  'dedupe(handler)) ahead of app.use(express.json())'

const SIGNATURE_DETAILS: Record<SignatureFailure, string> = {
  missing_signature: 'the webhook-id, webhook-timestamp and webhook-signature headers are required',
  invalid_signature: 'no webhook-signature matches the body with any configured secret',
  timestamp_out_of_window: 'webhook-timestamp is too far from this server’s clock (expired or in the future)',
}

function header(req: Request, name: string): string | undefined {
  const value = req.headers[name]
  return typeof value === 'string' ? value : undefined
}

/** The event fields every log line and refusal about a parsed event carries. */
function eventContext(event: OutboxEvent<unknown>) {
  return {
    eventId: event.eventId,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    sequence: event.sequence,
  }
}

/** Checks the transport: body not yet consumed, JSON content type, no compression, announced size. */
function checkTransport(req: Request, options: ResolvedConsumerOptions): Refusal | undefined {
  if (isBodyConsumed(req)) {
    return refusal('body_already_parsed', MOUNTING_HELP, {
      cause: new OutboxError('ERR_OUTBOX_BODY_ALREADY_PARSED', MOUNTING_HELP),
    })
  }
  const typeProblem = contentTypeProblem(header(req, 'content-type'))
  if (typeProblem !== undefined) return refusal('unsupported_media_type', typeProblem)
  const encoding = header(req, 'content-encoding')?.trim().toLowerCase()
  if (encoding !== undefined && encoding !== '' && encoding !== 'identity') {
    return refusal('unsupported_media_type', 'content-encoding is not supported; send the body uncompressed')
  }
  const announced = header(req, 'content-length')
  if (announced !== undefined && /^\d+$/.test(announced) && Number(announced) > options.maxBodyBytes) {
    return refusal(
      'payload_too_large',
      `the body is larger than the limit of ${options.maxBodyBytes} bytes`,
      {
        extensions: { limitBytes: options.maxBodyBytes },
      },
    )
  }
  return undefined
}

/**
 * PostgreSQL `text` cannot hold U+0000, which JSON allows: without this check such an envelope would reach the
 * database and fail there with a 500 — a client's mistake answered as a server error, retried forever.
 */
function checkStorable(event: OutboxEvent<unknown>): Refusal | undefined {
  // The common case first, without building anything: it runs on every delivery.
  if (!`${event.type}${event.aggregateType}${event.aggregateId}`.includes('\u0000')) return undefined
  const keys = { type: event.type, aggregate_type: event.aggregateType, aggregate_id: event.aggregateId }
  const errors = Object.entries(keys)
    .filter(([, value]) => value.includes('\u0000'))
    .map(([field]) => `${field} must not contain the NUL character (U+0000)`)
  return refusal('invalid_envelope', errors.join('; '), { eventId: event.eventId, extensions: { errors } })
}

/** Checks that the headers repeat the envelope's id and sequence (and, when signed, that webhook-id is the id). */
function checkHeaders(req: Request, event: OutboxEvent<unknown>, signed: boolean): Refusal | undefined {
  const key = header(req, HEADERS.idempotencyKey)
  if (key === undefined || key.toLowerCase() !== event.eventId.toLowerCase()) {
    return refusal(
      'idempotency_key_mismatch',
      key === undefined
        ? 'the x-idempotency-key header is required'
        : 'x-idempotency-key must equal event_id',
      eventContext(event),
    )
  }
  if (signed && header(req, HEADERS.webhookId)?.toLowerCase() !== event.eventId.toLowerCase()) {
    return refusal('idempotency_key_mismatch', 'webhook-id must equal event_id', eventContext(event))
  }
  const sequence = header(req, HEADERS.eventSequence)
  if (sequence === undefined || !/^\d{1,16}$/.test(sequence) || Number(sequence) !== event.sequence) {
    return refusal(
      'sequence_header_mismatch',
      sequence === undefined
        ? 'the x-event-sequence header is required'
        : 'x-event-sequence must equal sequence',
      eventContext(event),
    )
  }
  return undefined
}

/**
 * Creates a consumer: checks the options once and returns `dedupe`, which turns an at-least-once webhook stream
 * into effects applied exactly once and, per aggregate, in sequence order.
 *
 * For each request `dedupe` checks, in this order: the body is not already parsed (500 `body_already_parsed`, a
 * mounting mistake); content type (415) and size while streaming (413); signature and timestamp window, before
 * any parsing (401); JSON, envelope and the id/sequence headers (400). Then, in ONE transaction: it records the
 * event id (a duplicate answers `200 duplicate_ignored`), locks the aggregate's cursor, applies the sequence
 * policy (`stale_ignored`, or 409 under `'strict'`) and advances the cursor — one statement — then runs the
 * handler: `200 applied`.
 * If the handler throws, everything rolls back and the answer is 500 `handler_failed`, with no internals, so the
 * producer retries. A client's mistake never gets a 5xx; `onError` and the logger see every refusal.
 *
 * @example
 * ```ts
 * import { createConsumer } from '@outbox/consumer'
 * import express from 'express'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
 * const { dedupe } = createConsumer({ db, secret: process.env.WEBHOOK_SECRET, sequence: 'monotonic' })
 *
 * const app = express()
 * app.post(
 *   '/hooks',
 *   dedupe<{ order_id: string; status: string }>(async (event, trx) => {
 *     await trx.updateTable('orders').set({ status: event.data.status }).where('id', '=', event.data.order_id).execute()
 *   }),
 * )
 * app.use(express.json()) // parsers for other routes go after
 * ```
 */
export function createConsumer<DB = any>(options: ConsumerOptions<DB>): Consumer<DB> {
  const resolved = resolveConsumerOptions(options)
  const { logger } = resolved
  const applyEvent = createApplyEvent(resolved)
  // The default logger drops debug lines: then the per-delivery outcome line is not even built.
  const logsOutcomes = logger.debug !== consoleLogger.debug

  const refuse = (req: Request, res: Response, refused: Refusal) => {
    const meta = {
      status: refused.status,
      code: refused.code,
      detail: refused.detail,
      eventId: refused.eventId ?? header(req, HEADERS.idempotencyKey) ?? header(req, HEADERS.webhookId),
      aggregateType: refused.aggregateType,
      aggregateId: refused.aggregateId,
      sequence: refused.sequence,
      ...(refused.cause === undefined ? {} : { error: describe(refused.cause) }),
    }
    safeLog(logger, refused.status >= 500 ? 'error' : 'warn', meta, `webhook refused: ${refused.code}`)
    if (resolved.onError !== undefined) {
      try {
        resolved.onError(refused, req)
      } catch (error) {
        safeLog(logger, 'error', { error: describe(error) }, 'onError threw; the refusal is answered anyway')
      }
    }
    respondProblem(res, refused)
  }

  async function deliver<TData>(
    req: Request,
    res: Response,
    handler: DedupeHandler<TData, DB>,
  ): Promise<void> {
    const transportProblem = checkTransport(req, resolved)
    if (transportProblem !== undefined) return refuse(req, res, transportProblem)

    const read = await readRawBody(req, resolved.maxBodyBytes)
    if (!read.ok) {
      if (read.reason === 'aborted') {
        safeLog(logger, 'debug', {}, 'webhook aborted by the client while sending its body')
        return
      }
      return refuse(
        req,
        res,
        refusal('payload_too_large', `the body is larger than the limit of ${resolved.maxBodyBytes} bytes`, {
          extensions: { limitBytes: resolved.maxBodyBytes },
        }),
      )
    }

    // Authenticity first: nothing from an unauthenticated body is parsed, so a forger learns nothing but 401.
    if (resolved.keys !== undefined) {
      const verified = verifyWebhook(resolved.keys, req.headers, read.body, {
        toleranceSeconds: resolved.toleranceSeconds,
      })
      if (!verified.ok) return refuse(req, res, refusal(verified.reason, SIGNATURE_DETAILS[verified.reason]))
    }

    const parsed = parseEnvelope<TData>(read.body)
    if (!parsed.ok) {
      return refuse(
        req,
        res,
        refusal(parsed.code, parsed.errors.join('; '), { extensions: { errors: parsed.errors } }),
      )
    }
    const event = parsed.event
    const headerProblem = checkStorable(event) ?? checkHeaders(req, event, resolved.keys !== undefined)
    if (headerProblem !== undefined) return refuse(req, res, headerProblem)

    let outcome: ApplyOutcome
    try {
      outcome = await applyEvent(event, handler as DedupeHandler<TData>, req)
    } catch (error) {
      const handlerThrew = error instanceof HandlerFailure
      return refuse(
        req,
        res,
        refusal(
          'handler_failed',
          handlerThrew
            ? 'the handler failed; nothing was recorded, retry later'
            : 'the event could not be recorded (database error); nothing was recorded, retry later',
          { ...eventContext(event), cause: handlerThrew ? error.cause : error },
        ),
      )
    }
    if (outcome.kind === 'gap') {
      return refuse(
        req,
        res,
        refusal('sequence_gap', `waiting for sequence ${outcome.expected} of this aggregate first`, {
          ...eventContext(event),
          extensions: { expected: outcome.expected, received: event.sequence },
        }),
      )
    }
    if (logsOutcomes) {
      const fields = {
        ...eventContext(event),
        status: outcome.status,
        ...(outcome.cursor === undefined ? {} : { cursor: outcome.cursor }),
      }
      safeLog(logger, 'debug', fields, `webhook ${outcome.status}`)
    }
    respondDelivered(res, outcome.status, event.eventId)
  }

  return Object.freeze({
    dedupe<TData = JsonValue>(handler: DedupeHandler<TData, DB>): RequestHandler {
      if (typeof handler !== 'function') {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_OPTION',
          'dedupe: pass the handler, e.g. dedupe(async (event, trx, req) => { … })',
          { option: 'handler' },
        )
      }
      return async (req: Request, res: Response, next: NextFunction) => {
        try {
          await deliver(req, res, handler)
        } catch (error) {
          // Only a bug of ours lands here; answer like a failed handler so the producer retries.
          safeLog(logger, 'error', { error: describe(error) }, 'unexpected failure in dedupe')
          if (res.headersSent) return next(error)
          respondProblem(res, refusal('handler_failed', 'the event could not be processed; retry later'))
        }
      }
    },
  })
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
