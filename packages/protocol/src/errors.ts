/**
 * Stable codes of {@link OutboxError}, for every package of the project; match on these, never on messages.
 *
 * - `ERR_OUTBOX_INVALID_OPTION`: an option of a factory or function is wrong; `error.option` names it and the
 *   message says what to pass instead.
 * - `ERR_OUTBOX_INVALID_SECRET`: a signing secret is not `whsec_` + base64 (the secret itself is never shown).
 * - `ERR_OUTBOX_INVALID_ENVELOPE`: an event cannot be written as a wire envelope (e.g. `data` JSON cannot carry).
 * - `ERR_OUTBOX_INVALID_EVENT`: `enqueue` got an event without a usable type, aggregate or payload.
 * - `ERR_OUTBOX_NOT_A_TRANSACTION`: `enqueue` was given a Kysely instance instead of a transaction.
 * - `ERR_OUTBOX_PAYLOAD_NOT_JSON`: a payload JSON cannot carry (a bigint, a cycle, `undefined`).
 * - `ERR_OUTBOX_PAYLOAD_TOO_LARGE`: a payload above the size limit.
 * - `ERR_OUTBOX_MIGRATION_FAILED`: `migrate` could not bring the tables up to date; see `cause`.
 * - `ERR_OUTBOX_SCHEMA_OUTDATED`: the tables were migrated by an older version; run `migrate`.
 * - `ERR_OUTBOX_SCHEMA_NEWER`: the tables were migrated by a newer version; upgrade this one.
 * - `ERR_OUTBOX_BODY_ALREADY_PARSED`: a body parser read the request before the consumer's `dedupe`.
 * - `ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND`: no subscription has the id or name given.
 * - `ERR_OUTBOX_PRIVATE_ADDRESS`: the relay refused to connect a stored subscription's URL to a loopback, private,
 *   link-local or otherwise non-public address (relay option `allowPrivateNetworks` allows it).
 * - `ERR_OUTBOX_LANE_NOT_FOUND`: no lane (subscription and aggregate) matches, or it is not in the state the action
 *   needs (an unblock of a lane that is not blocked, a skip of a lane with nothing pending).
 * - `ERR_OUTBOX_LANE_LEASED`: a relay holds the lane under a live lease (it may be mid-request); try after it ends.
 * - `ERR_OUTBOX_LANE_BUSY`: an enqueue, a claim or another action held the lane longer than the action waits.
 * - `ERR_OUTBOX_REFUSED`: an action that would break a guarantee (e.g. discarding the dead letter that blocks its
 *   lane without unblocking it); the message says what to ask instead.
 * - `ERR_OUTBOX_SECRET_UNREADABLE`: a stored signing secret is encrypted and cannot be decrypted with the keys
 *   given (none given, its key id is not among them, or it does not authenticate under that key); the message names
 *   the key id and never shows the secret.
 *
 * @example
 * ```ts
 * import type { OutboxErrorCode } from '@outbox/protocol'
 * const isConfigurationMistake = (code: OutboxErrorCode) => code !== 'ERR_OUTBOX_MIGRATION_FAILED'
 * ```
 */
export type OutboxErrorCode =
  | 'ERR_OUTBOX_INVALID_OPTION'
  | 'ERR_OUTBOX_INVALID_SECRET'
  | 'ERR_OUTBOX_INVALID_ENVELOPE'
  | 'ERR_OUTBOX_INVALID_EVENT'
  | 'ERR_OUTBOX_NOT_A_TRANSACTION'
  | 'ERR_OUTBOX_PAYLOAD_NOT_JSON'
  | 'ERR_OUTBOX_PAYLOAD_TOO_LARGE'
  | 'ERR_OUTBOX_MIGRATION_FAILED'
  | 'ERR_OUTBOX_SCHEMA_OUTDATED'
  | 'ERR_OUTBOX_SCHEMA_NEWER'
  | 'ERR_OUTBOX_BODY_ALREADY_PARSED'
  | 'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND'
  | 'ERR_OUTBOX_PRIVATE_ADDRESS'
  | 'ERR_OUTBOX_LANE_NOT_FOUND'
  | 'ERR_OUTBOX_LANE_LEASED'
  | 'ERR_OUTBOX_LANE_BUSY'
  | 'ERR_OUTBOX_REFUSED'
  | 'ERR_OUTBOX_SECRET_UNREADABLE'

/**
 * Writes an option error's message with the given spellings: `name` spells an option (`'batchSize'` for the
 * library, `'--batch-size'` for a command line) and `got` shows the offending value.
 */
export type OptionMessage = (name: (option: string) => string, got: string) => string

/** The second argument of {@link OutboxError}'s constructor. */
export interface OutboxErrorOptions {
  /** The underlying error, kept as `cause`. */
  readonly cause?: unknown
  /** The option the error is about, kept as `option`. */
  readonly option?: string
}

const asIs = (option: string) => option

/**
 * The one error class of every outbox package: thrown for bad input, bad options, misuse and failed migrations.
 * The underlying error, if any, is kept as `cause`; an option error names its option in `option`.
 *
 * Match on `code`, not `instanceof`: two copies of a package in one app (two versions, or one loaded through
 * both `import` and `require`) make two `OutboxError` classes, and `instanceof` fails across them.
 *
 * @example
 * ```ts
 * import { type OutboxError, parseSigningSecrets } from '@outbox/protocol'
 * try {
 *   parseSigningSecrets('not-a-secret')
 * } catch (error) {
 *   if ((error as OutboxError).code === 'ERR_OUTBOX_INVALID_SECRET') console.error((error as Error).message)
 * }
 * ```
 */
export class OutboxError extends Error {
  override readonly name = 'OutboxError'
  /** A stable, machine-readable code. */
  readonly code: OutboxErrorCode
  /** The option at fault (`'batchSize'`, `'secret'`, …) when `code` is `ERR_OUTBOX_INVALID_OPTION`. */
  readonly option: string | undefined
  readonly #render: OptionMessage | undefined
  readonly #got: string

  constructor(code: OutboxErrorCode, message: string | OptionMessage, options?: OutboxErrorOptions) {
    const got = ''
    super(typeof message === 'string' ? message : message(asIs, got), { cause: options?.cause })
    this.code = code
    this.option = options?.option
    this.#render = typeof message === 'string' ? undefined : message
    this.#got = got
  }

  /**
   * The message with options spelled another way, e.g. a command line's flags, and the offending value as the
   * caller typed it; the message itself when the error was not written from parts.
   *
   * @example
   * ```ts
   * import { invalidOption } from '@outbox/protocol'
   * const error = invalidOption('batchSize', 0, (name, got) => `${name('batchSize')} must be ≥ 1, got ${got}`)
   * error.describe((option) => `--${option}`, '"0"') // '--batchSize must be ≥ 1, got "0"'
   * ```
   */
  describe(name: (option: string) => string, got?: string): string {
    return this.#render ? this.#render(name, got ?? this.#got) : this.message
  }
}

/**
 * An `ERR_OUTBOX_INVALID_OPTION` error about `option`, whose message `render` writes from the option names and
 * the offending value (a string shown in quotes), so a command line can say the same with its own flag names.
 *
 * @example
 * ```ts
 * import { invalidOption } from '@outbox/protocol'
 * const limit = 0
 * if (limit < 1) throw invalidOption('limit', limit, (name, got) => `${name('limit')} must be ≥ 1, got ${got}`)
 * ```
 */
export function invalidOption(
  option: string,
  value: unknown,
  render: OptionMessage,
  cause?: unknown,
): OutboxError {
  // Numbers as JavaScript writes them (NaN stays NaN), anything else as JSON so a string shows its quotes.
  const shown =
    typeof value === 'number' || value === undefined
      ? String(value)
      : (JSON.stringify(value) ?? String(value))
  return new OutboxError('ERR_OUTBOX_INVALID_OPTION', (name, got) => render(name, got || shown), {
    cause,
    option,
  })
}

/**
 * The codes `@outbox/protocol` used to throw.
 * @deprecated Use {@link OutboxErrorCode}.
 */
export type ProtocolErrorCode = OutboxErrorCode

/**
 * The error `@outbox/protocol` used to throw.
 * @deprecated Use {@link OutboxError} (match on `code`).
 */
export const ProtocolError = OutboxError
/** @deprecated Use {@link OutboxError}. */
export type ProtocolError = OutboxError
