import type { ProblemCode } from '@outbox/protocol'

/**
 * The event a receipt is about, as far as it is known: everything after the envelope was read, only the id (from a
 * header) before, nothing when not even that was sent.
 */
export interface ReceiptRef {
  /** The consumer's `source`. */
  readonly source: string
  readonly eventId?: string | undefined
  readonly eventType?: string | undefined
  readonly aggregateType?: string | undefined
  readonly aggregateId?: string | undefined
  readonly sequence?: number | undefined
}

/**
 * Everything a consumer reports, by event name (`receipt:<outcome>`, apart from the relay's `delivery:*`): one
 * event per request, after its answer is decided. Listeners that throw are caught and logged; there is no bare
 * `'error'` event.
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * consumer.on('receipt:failed', ({ eventId, error }) => console.error('webhook failed', eventId, error))
 * ```
 */
export interface ReceiptEventMap {
  /** The handler ran and committed with the event's record: `200 applied`. */
  'receipt:applied': ReceiptRef & {
    /** Milliseconds the handler ran. */
    readonly handlerMs: number
    /** Milliseconds from the request's arrival to its answer. */
    readonly durationMs: number
  }
  /** The event id was already recorded: `200 duplicate_ignored`, the handler did not run. */
  'receipt:duplicate': ReceiptRef & {
    /**
     * True when the id was recorded with another payload (type, aggregate, sequence or data differ from the first
     * delivery's): the same id reused for another event, whose payload was not applied. Also counted by
     * `outbox_consumer_payload_mismatches_total` and logged at `warn`.
     */
    readonly payloadMismatch: boolean
    readonly durationMs: number
  }
  /** A later event of the aggregate was applied already: `200 stale_ignored`, recorded, the handler did not run. */
  'receipt:stale': ReceiptRef & { readonly cursor: number | undefined; readonly durationMs: number }
  /**
   * A 4xx: the request was not a webhook this consumer accepts (signature, envelope, size, method, payload schema),
   * its body arrived too slowly (408 `request_timeout`) or, with 409 `sequence_gap`, it arrived before an earlier
   * event of its aggregate; or a 503 `server_busy`: too many bodies were in transit. Nothing was recorded.
   */
  'receipt:refused': ReceiptRef & {
    readonly status: number
    readonly code: ProblemCode
    readonly detail: string
    readonly durationMs: number
  }
  /**
   * A 5xx: the handler threw, the database failed or the consumer is mounted wrongly. Nothing was recorded; the
   * sender retries.
   */
  'receipt:failed': ReceiptRef & {
    readonly status: number
    readonly code: ProblemCode
    readonly detail: string
    readonly error: unknown
    readonly durationMs: number
  }
}

/**
 * A listener of one consumer event.
 *
 * @example
 * ```ts
 * import type { ReceiptListener } from '@outbox/consumer'
 * const onApplied: ReceiptListener<'receipt:applied'> = ({ eventId, handlerMs }) => console.log(eventId, handlerMs)
 * ```
 */
export type ReceiptListener<K extends keyof ReceiptEventMap> = (payload: ReceiptEventMap[K]) => void
