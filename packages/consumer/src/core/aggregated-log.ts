import { type Logger, safeLog } from '../logger.js'

/** One line of an {@link AggregatedLog}: its level, the key it is counted under, its fields and message. */
export type AggregatedLog = (
  level: 'warn' | 'error',
  key: string,
  fields: Record<string, unknown>,
  message: string,
) => void

interface Window {
  /** Lines counted since the last one written. */
  count: number
  /** The newest of them, written as the window's line. */
  last?: {
    readonly level: 'warn' | 'error'
    readonly fields: Record<string, unknown>
    readonly message: string
  }
}

/**
 * A log that writes at most one line per key per `intervalMs`, with the number of lines it stands for: what keeps
 * a flood of refusals (an unauthenticated client hammering the endpoint) from becoming a flood of `warn` lines,
 * while the first of them is still seen at once.
 *
 * The first line of a key is written immediately with `count: 1` and opens a window; lines of that key within the
 * window are only counted, and when it closes one line is written with their `count` (the newest line's fields),
 * opening the next window. A window in which nothing arrived closes quietly, so a later line is written at once
 * again. Timers are unref'd: the log never keeps a process alive.
 */
export function createAggregatedLog(logger: Logger, intervalMs: number): AggregatedLog {
  const windows = new Map<string, Window>()
  const open = (key: string) => {
    windows.set(key, { count: 0 })
    setTimeout(() => close(key), intervalMs).unref()
  }
  const close = (key: string) => {
    const window = windows.get(key)
    windows.delete(key)
    if (window?.last === undefined || window.count === 0) return
    const { level, fields, message } = window.last
    safeLog(logger, level, { ...fields, count: window.count, intervalMs }, message)
    open(key)
  }
  return (level, key, fields, message) => {
    const window = windows.get(key)
    if (window === undefined) {
      safeLog(logger, level, { ...fields, count: 1, intervalMs }, message)
      open(key)
      return
    }
    window.count++
    window.last = { level, fields, message }
  }
}
