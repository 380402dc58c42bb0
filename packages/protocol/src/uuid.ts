const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * Whether `value` is a UUID in its canonical text form (any case): event ids and subscription ids are. One
 * definition for every package, so what the relay sends is exactly what the consumer and the CLI accept.
 *
 * @example
 * ```ts
 * isUuid('0b9f5c2e-8a41-4d7e-9f3a-2b6c1d0e4f57') // true
 * isUuid('evt_123') // false
 * ```
 */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID.test(value)
}
