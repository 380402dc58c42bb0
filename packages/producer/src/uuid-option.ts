import { invalidOption, isUuid } from '@outbox/protocol'

/**
 * Checks an optional option that holds an id (a UUID): undefined passes, anything else must be a UUID and is
 * returned lower case (how PostgreSQL prints it back). The error names the option and says what it is (`what`).
 */
export function uuidOption(option: string, value: unknown, what: string): string | undefined {
  if (value === undefined) return undefined
  if (!isUuid(value)) {
    throw invalidOption(option, value, (name, got) => `${name(option)} must be ${what} (a UUID), got ${got}`)
  }
  return value.toLowerCase()
}

/** Checks an optional `subscriptionId` option ({@link uuidOption}): a subscription's id is a UUID. */
export function subscriptionIdOption(value: unknown): string | undefined {
  return uuidOption('subscriptionId', value, "a subscription's id")
}
