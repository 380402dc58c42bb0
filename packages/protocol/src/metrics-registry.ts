/**
 * The part of a prom-client `Registry` the relay's and the consumer's metrics need: pass `new Registry()` or
 * prom-client's default `register`. Structural, so no package's types depend on prom-client being installed.
 *
 * @example
 * ```ts
 * import type { MetricsRegistry } from '@outbox/protocol'
 * import { Registry } from 'prom-client'
 *
 * const register: MetricsRegistry = new Registry()
 * ```
 */
export interface MetricsRegistry {
  registerMetric(metric: any): void
  getSingleMetric(name: string): unknown
}
