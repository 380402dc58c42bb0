import {
  CONTENT_TYPE_PROBLEM,
  type DeliveryStatus,
  PROBLEMS,
  type ProblemCode,
  problem,
} from '@outbox/protocol'

/**
 * One refused delivery, as `onError` and the logger see it: the answer's status and stable problem code, a
 * detail sentence, what is known about the event, and — for `handler_failed` and `body_already_parsed` — the
 * underlying error as `cause` (never sent to the client).
 *
 * @example
 * ```ts
 * import { createConsumer, createPool, type Refusal } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const onError = (refused: Refusal) => {
 *   if (refused.status >= 500) console.error(refused.code, refused.eventId, refused.cause)
 * }
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET, onError })
 * ```
 */
export interface Refusal {
  readonly status: number
  readonly code: ProblemCode
  readonly detail: string
  /** The event id once the body was parsed, otherwise the `x-idempotency-key` or `webhook-id` header if any. */
  readonly eventId?: string | undefined
  readonly eventType?: string | undefined
  readonly aggregateType?: string | undefined
  readonly aggregateId?: string | undefined
  readonly sequence?: number | undefined
  readonly cause?: unknown
  /** Extra members of the problem document (e.g. `expected` and `received` for `sequence_gap`). */
  readonly extensions?: Readonly<Record<string, unknown>>
}

/**
 * A consumer's answer to one request, for any server to write: `closeConnection` is true whenever the request's
 * body was left unread (refused on its headers, or past `maxBodyBytes`), and the server must then close the
 * connection after answering — otherwise the client could keep uploading into a refused request.
 *
 * @example
 * ```ts
 * import type { WebhookResponse } from '@outbox/consumer'
 * import type { ServerResponse } from 'node:http'
 *
 * const write = (answer: WebhookResponse, res: ServerResponse) => {
 *   if (answer.closeConnection) res.setHeader('connection', 'close')
 *   res.writeHead(answer.status, answer.headers).end(answer.body)
 * }
 * ```
 */
export interface WebhookResponse {
  readonly status: number
  /**
   * Lower-case names; `content-type`, `content-length` and `cache-control` always, `allow` on a 405, `retry-after`
   * on a 503.
   */
  readonly headers: Readonly<Record<string, string>>
  /** JSON text: `{"status":…,"eventId":…}` on a 200, an RFC 9457 problem document otherwise. */
  readonly body: string
  readonly closeConnection: boolean
}

/** Builds a refusal with the status that belongs to its code. */
export function refusal(
  code: ProblemCode,
  detail: string,
  more: Omit<Refusal, 'status' | 'code' | 'detail'> = {},
): Refusal {
  return { ...more, status: PROBLEMS[code].status, code, detail }
}

/**
 * The answer to a refusal: an RFC 9457 problem document with the code, detail and extensions — never `cause`.
 * A 405 carries `Allow: POST`.
 */
export function problemResponse(refused: Refusal, closeConnection: boolean): WebhookResponse {
  const body = JSON.stringify(problem(refused.code, refused.detail, { ...refused.extensions }))
  const headers: Record<string, string> = {
    'content-type': CONTENT_TYPE_PROBLEM,
    'content-length': String(Buffer.byteLength(body)),
    'cache-control': 'no-store',
  }
  if (refused.status === 405) headers.allow = 'POST'
  // A 503 is a moment of overload, never the event's fault: the sender may come back in a second.
  if (refused.status === 503) headers['retry-after'] = '1'
  return { status: refused.status, headers, body, closeConnection }
}

/** The 200 answer the relay reads: `{"status": …, "eventId": …}`. */
export function deliveredResponse(status: DeliveryStatus, eventId: string): WebhookResponse {
  // The same text as JSON.stringify({ status, eventId }): `status` is one of a few fixed words with nothing to escape.
  const body = `{"status":"${status}","eventId":${JSON.stringify(eventId)}}`
  return {
    status: 200,
    headers: {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      'cache-control': 'no-store',
    },
    body,
    closeConnection: false,
  }
}
