/**
 * The logging interface the consumer writes to: pino, a `console` wrapper or anything with these four methods.
 *
 * Messages are short sentences; `meta` carries the event id, aggregate, sequence and problem code. Secrets and
 * bodies are never logged.
 *
 * @example
 * ```ts
 * import type { Logger } from '@outbox/consumer'
 * const logger: Logger = {
 *   debug: () => {},
 *   info: (msg, meta) => console.info(msg, meta ?? {}),
 *   warn: (msg, meta) => console.warn(msg, meta ?? {}),
 *   error: (msg, meta) => console.error(msg, meta ?? {}),
 * }
 * ```
 */
export interface Logger {
  debug(msg: string, meta?: Record<string, unknown>): void
  info(msg: string, meta?: Record<string, unknown>): void
  warn(msg: string, meta?: Record<string, unknown>): void
  error(msg: string, meta?: Record<string, unknown>): void
}

/**
 * The logger used when none is given: quiet for `debug` and `info`, `console.warn`/`console.error` otherwise.
 *
 * @example
 * ```ts
 * import { DEFAULT_LOGGER } from '@outbox/consumer'
 * DEFAULT_LOGGER.warn('visible on stderr', { code: 'example' })
 * ```
 */
export const DEFAULT_LOGGER: Logger = Object.freeze({
  debug: () => {},
  info: () => {},
  warn: (msg: string, meta?: Record<string, unknown>) => console.warn(`[outbox/consumer] ${msg}`, meta ?? {}),
  error: (msg: string, meta?: Record<string, unknown>) =>
    console.error(`[outbox/consumer] ${msg}`, meta ?? {}),
})

/** Calls a logger method without letting a throwing logger turn an answer into a failure (internal). */
export function safeLog(
  logger: Logger,
  level: keyof Logger,
  msg: string,
  meta?: Record<string, unknown>,
): void {
  try {
    logger[level](msg, meta)
  } catch {
    // A broken logger must never turn an answer into a 500.
  }
}
