import { OutboxError } from './errors.js'

/** The schema the producer tables live in when none is given. */
export const DEFAULT_SCHEMA = 'public'

const IDENTIFIER = /^[a-z_][a-z0-9_$]{0,62}$/

/**
 * Checks a schema name. It becomes part of DDL and of the NOTIFY channel name, so only plain lower-case
 * identifiers are accepted (no quoting games).
 */
export function resolveSchema(schema: string | undefined): string {
  const name = schema ?? DEFAULT_SCHEMA
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTIONS',
      `schema must be a lower-case SQL identifier (letters, digits, _), got ${JSON.stringify(schema)}`,
    )
  }
  return name
}

/**
 * The NOTIFY channel of a schema's outbox: enqueue notifies it, the relay listens on it.
 *
 * @example
 * ```ts
 * import { notifyChannel } from '@outbox/producer'
 * notifyChannel('public') // 'outbox_public'
 * ```
 */
export function notifyChannel(schema: string = DEFAULT_SCHEMA): string {
  return `outbox_${resolveSchema(schema)}`
}
