import { DEFAULT_SIGNATURE_TOLERANCE_SECONDS } from '@outbox/protocol'
import { OutboxError } from '../errors.js'

/**
 * A verifier's `toleranceSeconds`, checked when the verifier is made: a positive, finite number of seconds, or
 * the default (300, as Standard Webhooks and Stripe) when left out.
 */
export function checkTolerance(value: unknown, where: string): number {
  if (value === undefined) return DEFAULT_SIGNATURE_TOLERANCE_SECONDS
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      `${where}: \`toleranceSeconds\` must be a positive number of seconds (got ${String(value)})`,
      { option: 'toleranceSeconds' },
    )
  }
  return value
}

/** Whether a signed unix timestamp (seconds) is within `toleranceSeconds` of `now`, either way. */
export function withinTolerance(timestamp: number, now: Date, toleranceSeconds: number): boolean {
  return Math.abs(Math.floor(now.getTime() / 1000) - timestamp) <= toleranceSeconds
}
