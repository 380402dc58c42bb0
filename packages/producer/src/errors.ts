/** Stable codes of {@link OutboxError}; match on these, never on messages. */
export type OutboxErrorCode =
  | 'ERR_OUTBOX_NOT_A_TRANSACTION'
  | 'ERR_OUTBOX_INVALID_EVENT'
  | 'ERR_OUTBOX_PAYLOAD_NOT_JSON'
  | 'ERR_OUTBOX_PAYLOAD_TOO_LARGE'
  | 'ERR_OUTBOX_INVALID_OPTIONS'
  | 'ERR_OUTBOX_MIGRATION_FAILED'
  | 'ERR_OUTBOX_SCHEMA_OUTDATED'
  | 'ERR_OUTBOX_RELAY_STOPPED'

/**
 * The one error type `@outbox/producer` throws for bad input or misuse. `cause` keeps the underlying error.
 *
 * @example
 * ```ts
 * import { OutboxError } from '@outbox/producer'
 * function explain(error: unknown) {
 *   if (error instanceof OutboxError && error.code === 'ERR_OUTBOX_PAYLOAD_TOO_LARGE') return 'split the event'
 *   return 'unexpected'
 * }
 * ```
 */
export class OutboxError extends Error {
  override readonly name = 'OutboxError'
  /** A stable, machine-readable code. */
  readonly code: OutboxErrorCode

  constructor(code: OutboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
  }
}
