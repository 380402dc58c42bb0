import { invalidOption } from './errors.js'

/**
 * The schema the outbox tables (producer's and consumer's) live in when none is given.
 *
 * @example
 * ```ts
 * import { DEFAULT_SCHEMA } from '@outbox/protocol'
 * const schema = process.env.OUTBOX_SCHEMA ?? DEFAULT_SCHEMA
 * ```
 */
export const DEFAULT_SCHEMA = 'public'

const IDENTIFIER = /^[a-z_][a-z0-9_$]{0,62}$/

/**
 * Checks a schema name and returns it, or {@link DEFAULT_SCHEMA} when it is undefined. It becomes part of DDL and
 * of the NOTIFY channel name, so only plain lower-case identifiers are accepted (no quoting games); anything else
 * throws an `OutboxError` `ERR_OUTBOX_INVALID_OPTION` with `option: 'schema'`.
 *
 * @example
 * ```ts
 * import { resolveSchema } from '@outbox/protocol'
 * resolveSchema(undefined) // 'public'
 * resolveSchema('billing') // 'billing'
 * ```
 */
export function resolveSchema(schema: string | undefined): string {
  const name = schema ?? DEFAULT_SCHEMA
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw invalidOption(
      'schema',
      schema,
      (spell, got) =>
        `${spell('schema')} must be a lower-case SQL identifier (letters, digits, _), got ${got}`,
    )
  }
  return name
}
