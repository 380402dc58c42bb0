import { DEFAULT_SCHEMA, resolveSchema } from '@outbox/protocol'

// The schema rule and default are shared with the consumer, so they live in @outbox/protocol.
export { DEFAULT_SCHEMA, resolveSchema }

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
