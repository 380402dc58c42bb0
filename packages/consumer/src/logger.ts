import { consoleLogger, type Logger } from '@outbox/protocol'

// One logger type for every package, in pino's (fields, message) order, defined in @outbox/protocol.
export { consoleLogger, isLogger, type Logger, type LogMethod, silentLogger } from '@outbox/protocol'

/**
 * The logger used when none is given: quiet for `debug` and `info`, `console.warn`/`console.error` otherwise.
 * @deprecated Use {@link consoleLogger} (the same logger, the producer's name for it).
 */
export const DEFAULT_LOGGER: Logger = consoleLogger

/** Calls a logger method without letting a throwing logger turn an answer into a failure (internal). */
export function safeLog(
  logger: Logger,
  level: keyof Logger,
  fields: Record<string, unknown>,
  message: string,
): void {
  try {
    logger[level](fields, message)
  } catch {
    // A broken logger must never turn an answer into a 500.
  }
}
