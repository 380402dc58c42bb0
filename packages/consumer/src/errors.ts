/**
 * Stable codes of {@link OutboxError}; match on these, never on messages.
 *
 * - `ERR_OUTBOX_INVALID_OPTION`: an option of `createConsumer`, `dedupe`, `migrate` or `pruneProcessed` is wrong;
 *   the message names it and says what to pass instead.
 * - `ERR_OUTBOX_INVALID_SECRET`: a signing secret is not `whsec_` + base64 (the secret itself is never shown).
 * - `ERR_OUTBOX_MIGRATION_FAILED`: `migrate` could not bring the consumer tables up to date; see `cause`.
 * - `ERR_OUTBOX_BODY_ALREADY_PARSED`: a body parser read the request before `dedupe` (a mounting mistake).
 * - `ERR_OUTBOX_SCHEMA_OUTDATED`: the consumer tables were migrated by an older `@outbox/consumer`; run `migrate`
 *   (handed to `onError` and logged as the `cause` of a 500 `handler_failed`).
 *
 * @example
 * ```ts
 * import type { OutboxErrorCode } from '@outbox/consumer'
 * const isConfigurationMistake = (code: OutboxErrorCode) => code !== 'ERR_OUTBOX_MIGRATION_FAILED'
 * ```
 */
export type OutboxErrorCode =
  | 'ERR_OUTBOX_INVALID_OPTION'
  | 'ERR_OUTBOX_INVALID_SECRET'
  | 'ERR_OUTBOX_MIGRATION_FAILED'
  | 'ERR_OUTBOX_BODY_ALREADY_PARSED'
  | 'ERR_OUTBOX_SCHEMA_OUTDATED'

/**
 * The one error class of `@outbox/consumer`: thrown for bad options and failed migrations, and handed to
 * `onError` for a mounting mistake or an outdated schema. The underlying error, if any, is kept as `cause`.
 *
 * @example
 * ```ts
 * import { createConsumer, OutboxError } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
 * try {
 *   createConsumer({ db, secret: 'not-a-secret' })
 * } catch (error) {
 *   if (error instanceof OutboxError && error.code === 'ERR_OUTBOX_INVALID_SECRET') console.error(error.message)
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
