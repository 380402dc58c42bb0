/** One log method: pino's argument order — structured fields first, then the message. */
export type LogMethod = (fields: Record<string, unknown>, message: string) => void

/**
 * The logger every outbox package writes to, pino-compatible: pass a pino instance (or a child of one) as-is.
 * Fields carry `eventId`, `lane` (`type:id`), `status` and so on, so logs can be filtered by event or aggregate;
 * secrets and bodies are never logged.
 *
 * @example
 * ```ts
 * import type { Logger } from '@outbox/protocol'
 * const logger: Logger = {
 *   debug: () => {},
 *   info: (fields, message) => console.info(message, fields),
 *   warn: (fields, message) => console.warn(message, fields),
 *   error: (fields, message) => console.error(message, fields),
 * }
 * ```
 */
export interface Logger {
  readonly debug: LogMethod
  readonly info: LogMethod
  readonly warn: LogMethod
  readonly error: LogMethod
}

const noop: LogMethod = () => {}

/**
 * The default logger: quiet except warnings and errors, one line on stderr each.
 *
 * @example
 * ```ts
 * import { consoleLogger } from '@outbox/protocol'
 * consoleLogger.warn({ lane: 'order:42' }, 'lane parked')
 * ```
 */
export const consoleLogger: Logger = Object.freeze({
  debug: noop,
  info: noop,
  warn: (fields: Record<string, unknown>, message: string) => console.warn(`[outbox] ${message}`, fields),
  error: (fields: Record<string, unknown>, message: string) => console.error(`[outbox] ${message}`, fields),
})

/**
 * A logger that drops everything.
 *
 * @example
 * ```ts
 * import { silentLogger } from '@outbox/protocol'
 * silentLogger.error({}, 'never printed')
 * ```
 */
export const silentLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop })

/**
 * Whether `value` has the four methods of a {@link Logger}, for option checks.
 *
 * @example
 * ```ts
 * import { isLogger } from '@outbox/protocol'
 * isLogger(console) // true
 * ```
 */
export function isLogger(value: unknown): value is Logger {
  if (typeof value !== 'object' || value === null) return false
  const candidate = value as Record<string, unknown>
  return (['debug', 'info', 'warn', 'error'] as const).every(
    (level) => typeof candidate[level] === 'function',
  )
}
