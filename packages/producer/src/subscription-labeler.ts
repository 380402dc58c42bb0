import type { SubscriptionLabels } from './metrics.js'

/**
 * Maps subscriptions (by name or by id, one labeler per kind) to `subscription` label values under a
 * {@link SubscriptionLabels} policy: the first `max` values seen keep their own label for the life of the process and
 * the rest share `other`, so a relay serving thousands of tenants creates a bounded number of series.
 */
export class SubscriptionLabeler {
  readonly #seen = new Set<string>()
  constructor(private readonly policy: SubscriptionLabels) {}

  /** The label value for a subscription's name or id. */
  label(value: string): string {
    if (this.policy === 'all') return value
    if (this.policy === 'none') return 'all'
    if (this.#seen.has(value)) return value
    if (this.#seen.size >= this.policy.max) return 'other'
    this.#seen.add(value)
    return value
  }
}
