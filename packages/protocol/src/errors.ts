/** Stable codes of {@link ProtocolError}; match on these, never on messages. */
export type ProtocolErrorCode = 'ERR_OUTBOX_INVALID_SECRET' | 'ERR_OUTBOX_INVALID_ENVELOPE'

/**
 * The error every function of `@outbox/protocol` throws for bad input.
 *
 * @example
 * ```ts
 * import { ProtocolError, parseSigningSecrets } from '@outbox/protocol'
 * try {
 *   parseSigningSecrets('not-a-secret')
 * } catch (error) {
 *   if (error instanceof ProtocolError) console.error(error.code, error.message)
 * }
 * ```
 */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError'
  /** A stable, machine-readable code. */
  readonly code: ProtocolErrorCode

  constructor(code: ProtocolErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
  }
}
