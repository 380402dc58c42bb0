import type { Logger } from '../logger.js'
import type { BodyGate } from './body-gate.js'
import type { Receive } from './receive.js'

/**
 * The key under which a consumer keeps its core for adapters shipped in other entry points (the Fastify plugin):
 * not part of the public API, and a symbol so it never shows up in the consumer's own keys.
 */
export const CORE = Symbol('outbox.consumer.core')

/** What {@link CORE} holds. */
export interface ConsumerCore {
  readonly receive: Receive
  readonly logger: Logger
  /** The consumer's bodies in transit (the bound and the bytes they hold), shared by every adapter. */
  readonly bodies: BodyGate
}
