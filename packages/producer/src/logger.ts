/** One log method: pino's argument order — structured fields first, then the message. */
export type LogMethod = (fields: Record<string, unknown>, message: string) => void

/**
 * A pino-compatible logger: pass a pino instance (or a child of one) as-is. Fields carry `eventId`, `lane`
 * (`type:id`), `status` and so on, so logs can be filtered by event or aggregate.
 */
export interface Logger {
  readonly debug: LogMethod
  readonly info: LogMethod
  readonly warn: LogMethod
  readonly error: LogMethod
}

const noop: LogMethod = () => {}

/**
 * The default logger: quiet except warnings and errors, one JSON-ish line on stderr each.
 *
 * @example
 * ```ts
 * import { consoleLogger } from '@outbox/producer'
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
 * import { silentLogger } from '@outbox/producer'
 * silentLogger.error({}, 'never printed')
 * ```
 */
export const silentLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop })
