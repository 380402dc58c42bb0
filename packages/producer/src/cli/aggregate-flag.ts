import { UsageError } from './cli-error.js'

/** An aggregate as `--aggregate` names it: its type and its id. */
export interface AggregateRef {
  /** The aggregate's type, e.g. `order`. */
  readonly aggregateType: string
  /** The aggregate's id within its type, e.g. `42`. */
  readonly aggregateId: string
}

/**
 * Reads `--aggregate <type>/<id>` (`order/42`), the one form every command takes, split at the first `/`: an
 * aggregate id may hold slashes, a type should not. Undefined when the flag is absent.
 *
 * @example
 * ```ts
 * aggregateFlag('order/42') // { aggregateType: 'order', aggregateId: '42' }
 * aggregateFlag('file/a/b') // { aggregateType: 'file', aggregateId: 'a/b' }
 * ```
 */
export function aggregateFlag(value: string | undefined): AggregateRef | undefined {
  if (value === undefined) return undefined
  const slash = value.indexOf('/')
  if (slash <= 0 || slash === value.length - 1) {
    throw new UsageError(
      `--aggregate takes <type>/<id>, e.g. --aggregate order/42; got ${JSON.stringify(value)}`,
    )
  }
  return { aggregateType: value.slice(0, slash), aggregateId: value.slice(slash + 1) }
}
