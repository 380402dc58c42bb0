import { invalidOption } from './errors.js'

const UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
}
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$/

/** A duration: milliseconds, or a string such as `'500ms'`, `'90s'`, `'15m'`, `'12h'`, `'30d'`, `'2w'`. */
export type Duration = number | string

/**
 * Turns a {@link Duration} into milliseconds (decimals allowed: `'1.5h'`), or throws an `OutboxError`
 * `ERR_OUTBOX_INVALID_OPTION` whose `option` is `name` and whose message lists the accepted forms.
 *
 * @example
 * ```ts
 * import { parseDuration } from '@outbox/protocol'
 * parseDuration('30d', 'retention') // 2_592_000_000
 * ```
 */
export function parseDuration(value: Duration, name: string): number {
  if (typeof value === 'number') {
    if (Number.isFinite(value) && value >= 0) return value
  } else if (typeof value === 'string') {
    const match = DURATION.exec(value.trim())
    if (match) return Math.round(Number(match[1]) * UNITS[match[2]!]!)
  }
  throw invalidOption(
    name,
    value,
    (spell, got) =>
      `${spell(name)} must be milliseconds (a non-negative number) or a string like '30d', '12h', '15m', '90s', '500ms'; got ${got}`,
  )
}
