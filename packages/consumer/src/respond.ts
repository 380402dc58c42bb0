import type { ServerResponse } from 'node:http'
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
 * import { createConsumer, type Refusal } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
 * const onError = (refused: Refusal) => {
 *   if (refused.status >= 500) console.error(refused.code, refused.eventId, refused.cause)
 * }
 * const { dedupe } = createConsumer({ db, secret: process.env.WEBHOOK_SECRET, onError })
 * ```
 */
export interface Refusal {
  readonly status: number
  readonly code: ProblemCode
  readonly detail: string
  /** The event id once the body was parsed, otherwise the `x-idempotency-key` or `webhook-id` header if any. */
  readonly eventId?: string
  readonly aggregateType?: string
  readonly aggregateId?: string
  readonly sequence?: number
  readonly cause?: unknown
  /** Extra members of the problem document (e.g. `expected` and `received` for `sequence_gap`). */
  readonly extensions?: Readonly<Record<string, unknown>>
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
 * Writes an RFC 9457 problem document. Node's own response API is used (not Express helpers) so the answer is
 * byte-identical under Express 4 and 5; only the code, detail and extensions travel — never `cause`.
 */
export function respondProblem(res: ServerResponse, refused: Refusal): void {
  if (res.headersSent) return
  const body = JSON.stringify(problem(refused.code, refused.detail, { ...refused.extensions }))
  res.statusCode = refused.status
  res.setHeader('content-type', CONTENT_TYPE_PROBLEM)
  res.setHeader('content-length', Buffer.byteLength(body))
  res.setHeader('cache-control', 'no-store')
  res.end(body)
}

/** Writes the 200 answer the relay reads: `{"status": …, "eventId": …}`. */
export function respondDelivered(res: ServerResponse, status: DeliveryStatus, eventId: string): void {
  if (res.headersSent) return
  const body = JSON.stringify({ status, eventId })
  res.statusCode = 200
  res.setHeader('content-type', 'application/json')
  res.setHeader('content-length', Buffer.byteLength(body))
  res.setHeader('cache-control', 'no-store')
  res.end(body)
}
