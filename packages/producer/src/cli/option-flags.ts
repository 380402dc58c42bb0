import type { OutboxError } from '../errors.js'
import { UsageError } from './cli-error.js'

/** Library options whose flag is not their own name in kebab case. */
const RENAMED: Readonly<Record<string, string>> = {
  signingSecret: '--secret',
  eventTypes: '--event-type',
  ratePerSecond: '--rate',
  subscriptions: '--subscription',
  subscriptionId: '--subscription',
  // Keys are never typed on a command line (ps shows it): the environment is their only way in.
  secretKeys: 'OUTBOX_SECRET_KEYS',
}

/**
 * The flag that sets a library option: its name in kebab case (`batchSize` → `--batch-size`) without the unit of a
 * duration (`requestTimeoutMs` → `--request-timeout`, which takes `10s` as well as milliseconds), or as renamed.
 *
 * @example
 * ```ts
 * flagOf('requestTimeoutMs') // '--request-timeout'
 * ```
 */
export function flagOf(option: string): string {
  return (
    RENAMED[option] ??
    `--${option.replace(/Ms$/, '').replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`)}`
  )
}

/**
 * Whether `error` is the library's option error: matched on `code` and the error's own `describe`, not on
 * `instanceof` (this module must not load the library) and never on its message.
 */
function isOptionError(error: unknown): error is OutboxError & { option: string } {
  const { code, option, describe } = (error ?? {}) as Partial<OutboxError>
  return code === 'ERR_OUTBOX_INVALID_OPTION' && typeof option === 'string' && typeof describe === 'function'
}

/**
 * The library's message of an option error, written with the operator's flags (`error.option` names the option)
 * and, when `values` holds the flag's text, the value as typed; undefined for any other error.
 *
 * @example
 * ```ts
 * // new Relay({ concurrency: Number.NaN }) threw 'concurrency must be an integer from 1 to 1000, got NaN':
 * // flagMessage(error, { concurrency: 'many' }) is '--concurrency must be an integer from 1 to 1000, got "many"'
 * ```
 */
export function flagMessage(
  error: unknown,
  values: Readonly<Record<string, unknown>> = {},
): string | undefined {
  if (!isOptionError(error)) return undefined
  const typed = values[flagOf(error.option).slice(2)]
  // Only single text values are echoed: a repeatable flag may be --secret, whose values are never shown.
  return error.describe(flagOf, typeof typed === 'string' ? JSON.stringify(typed) : undefined)
}

/**
 * Runs `action`, turning the library's option errors into a {@link UsageError} (exit 2) that names the flags the
 * operator typed; the library is the one place that knows each option's bounds, the CLI only parses.
 */
export async function withFlagNames<T>(
  values: Readonly<Record<string, unknown>>,
  action: () => T | Promise<T>,
): Promise<T> {
  try {
    return await action()
  } catch (error) {
    const message = flagMessage(error, values)
    throw message === undefined ? error : new UsageError(message, { cause: error })
  }
}
