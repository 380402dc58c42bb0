import { randomBytes } from 'node:crypto'
import { isUuid, parseSigningSecrets } from '@outbox/protocol'
import { invalidOption, type OptionMessage } from './errors.js'
import { checkEndpointUrl, type OnExhausted } from './options.js'

/** What a subscription is: where it delivers, what it receives, and its own limits. */
export interface SubscriptionSettings {
  /** The subscriber's absolute http(s) URL. */
  readonly url: string
  /** A unique name, for people and the CLI (`outbox subscriptions show <name>`). @defaultValue none */
  readonly name?: string
  /**
   * Receive only the events of this tenant (`enqueue`'s `tenant`), or `'*'`: every tenant's events and those without
   * a tenant, for internal services, never for a customer. Leaving it out means `'*'` only while no stored
   * subscription has a tenant; once one has, a subscription without a tenant is refused, so a field left out of a
   * customer's form cannot leak every tenant's data.
   */
  readonly tenant?: string
  /**
   * Receive only these event types: each an exact type (`order.created`) or a prefix ending in `*` (`order.*`).
   * @defaultValue every type
   */
  readonly eventTypes?: readonly string[]
  /** What an exhausted event does to its lane (see the relay's option). @defaultValue the relay's */
  readonly onExhausted?: OnExhausted
  /**
   * The most lanes of this subscription in flight at once, across every relay (counted from live leases, lanes
   * claimed ahead included): a small or fragile endpoint is never sent more than this in parallel.
   * @defaultValue no limit beyond the relays' `concurrency`
   */
  readonly maxInFlight?: number
  /**
   * The most requests per second sent to this subscription's endpoint, by every relay together (fractions allowed:
   * `0.5` is one request every two seconds). Held in PostgreSQL as a token bucket that allows a burst of one
   * second's worth (at least one request); a lane of a rate-limited subscription carries one event per claim.
   * @defaultValue no rate
   */
  readonly ratePerSecond?: number
  /** Delays in ms before each retry, as the relay's `retrySchedule`. @defaultValue the relay's */
  readonly retrySchedule?: readonly number[]
  /**
   * Per-request timeout in ms. Must fit the serving relays' lease (`requestTimeoutMs` + 250 ms below `leaseMs`),
   * or a relay skips the subscription and says so. @defaultValue the relay's
   */
  readonly requestTimeoutMs?: number
}

/** {@link createSubscription}'s input. */
export interface CreateSubscriptionInput extends SubscriptionSettings {
  /** Standard Webhooks secret `whsec_…` (24 to 64 bytes). @defaultValue a new random 32-byte secret, returned once */
  readonly secret?: string
  /**
   * Where the subscription starts: `'now'`, every event committed after it is created; `'earliest'`, first every
   * retained event it wants (one some subscription still has a row of, pending, sent or dead), copied by the relays
   * in bounded batches, then everything committed after it is created — per aggregate in sequence order. It
   * delivers nothing until the copy is done. Events no subscription stored, or already pruned, cannot be copied.
   * @defaultValue 'now'
   */
  readonly startAt?: StartAt
}

/** Where a new subscription starts (see {@link CreateSubscriptionInput.startAt}). */
export type StartAt = 'now' | 'earliest'

/**
 * {@link updateSubscription}'s changes: any setting; `null` clears an optional one (back to every tenant, every
 * type, the relay's defaults).
 */
export type SubscriptionChanges = {
  readonly [K in keyof SubscriptionSettings]?: K extends 'url' ? string : SubscriptionSettings[K] | null
}

/** Settings checked and normalised, as stored: `null` for "not set". */
export interface StoredSettings {
  readonly url?: string
  readonly name?: string | null
  readonly tenant?: string | null
  readonly eventTypes?: readonly string[] | null
  readonly onExhausted?: OnExhausted | null
  readonly maxInFlight?: number | null
  readonly ratePerSecond?: number | null
  readonly retrySchedule?: readonly number[] | null
  readonly requestTimeoutMs?: number | null
}

const SETTINGS: readonly (keyof SubscriptionSettings)[] = [
  'url',
  'name',
  'tenant',
  'eventTypes',
  'onExhausted',
  'maxInFlight',
  'ratePerSecond',
  'retrySchedule',
  'requestTimeoutMs',
]

/** {@link SubscriptionSettings.tenant} for every tenant's events. */
export const ALL_TENANTS = '*'

/** The longest name, tenant or event-type filter entry: the same bound as an aggregate key. */
const MAX_TEXT = 200
/** The most entries of an event-type filter: a longer list is a sign that a prefix was meant. */
const MAX_EVENT_TYPES = 100
/** The longest request timeout a subscription may ask for: a relay's lease must still fit it. */
const MAX_REQUEST_TIMEOUT_MS = 600_000
/**
 * The highest `ratePerSecond`: above it a rate is no protection for an endpoint, and a bucket of that many tokens a
 * burst no endpoint asked for.
 */
const MAX_RATE_PER_SECOND = 10_000
/** The lowest `ratePerSecond`, one request every 1000 s: below it a subscription is better disabled. */
const MIN_RATE_PER_SECOND = 0.001
/** The longest retry delay: a week, as a longer wait is an outage that needs a person. */
const MAX_RETRY_DELAY_MS = 7 * 24 * 3600_000

function refuse(option: string, value: unknown, render: OptionMessage): never {
  throw invalidOption(option, value, render)
}

function text(value: unknown, option: string): string {
  if (
    typeof value !== 'string' ||
    value.trim().length === 0 ||
    value.length > MAX_TEXT ||
    value.includes('\u0000')
  ) {
    refuse(
      option,
      value,
      (spell, got) =>
        `${spell(option)} must be a non-empty string of at most ${MAX_TEXT} characters, got ${got}`,
    )
  }
  return value
}

function eventTypes(value: unknown): readonly string[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_EVENT_TYPES) {
    refuse(
      'eventTypes',
      value,
      (spell) =>
        `${spell('eventTypes')} must be a list of 1 to ${MAX_EVENT_TYPES} event types (omit it to receive every type)`,
    )
  }
  for (const entry of value) {
    text(entry, 'eventTypes')
    if ((entry as string).slice(0, -1).includes('*')) {
      refuse(
        'eventTypes',
        entry,
        (spell, got) =>
          `${spell('eventTypes')} entries are an exact type or a prefix ending in * ('order.*'), got ${got}`,
      )
    }
  }
  return Object.freeze([...new Set(value as string[])])
}

function positiveInteger(value: unknown, option: string, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > max) {
    refuse(option, value, (spell, got) => `${spell(option)} must be an integer from 1 to ${max}, got ${got}`)
  }
  return value
}

function ratePerSecond(value: unknown): number {
  if (
    typeof value !== 'number' ||
    !Number.isFinite(value) ||
    value < MIN_RATE_PER_SECOND ||
    value > MAX_RATE_PER_SECOND
  ) {
    refuse(
      'ratePerSecond',
      value,
      (spell, got) =>
        `${spell('ratePerSecond')} must be a number of requests per second from ${MIN_RATE_PER_SECOND} to ${MAX_RATE_PER_SECOND} (0.5 is one every 2 s), got ${got}`,
    )
  }
  return value
}

function retrySchedule(value: unknown): readonly number[] {
  if (
    !Array.isArray(value) ||
    value.length > 100 ||
    value.some(
      (delay) =>
        typeof delay !== 'number' || !Number.isSafeInteger(delay) || delay < 0 || delay > MAX_RETRY_DELAY_MS,
    )
  ) {
    refuse(
      'retrySchedule',
      value,
      (spell) =>
        `${spell('retrySchedule')} must be a list of at most 100 delays in whole milliseconds, each at most a week, e.g. [5000, 300000]`,
    )
  }
  return Object.freeze([...(value as number[])])
}

function onExhausted(value: unknown): OnExhausted {
  if (value !== 'skip' && value !== 'block') {
    refuse(
      'onExhausted',
      value,
      (spell, got) => `${spell('onExhausted')} must be 'skip' or 'block', got ${got}`,
    )
  }
  return value
}

/** Checks one setting; `null` (clear it) only where `clearable`. */
function setting(key: keyof SubscriptionSettings, value: unknown, clearable: boolean): unknown {
  if (value === null && clearable && key !== 'url') return null
  switch (key) {
    case 'url':
      return checkEndpointUrl(value, 'url')
    case 'name': {
      const name = text(value, 'name')
      // A name that looks like an id would make `show <id-or-name>` ambiguous.
      if (isUuid(name))
        refuse('name', name, (spell) => `${spell('name')} must not look like a subscription id`)
      return name
    }
    case 'tenant':
      // '*' is said on purpose, and stored as "every tenant" (null), as a subscription without one always was.
      return value === ALL_TENANTS ? null : text(value, 'tenant')
    case 'eventTypes':
      return eventTypes(value)
    case 'onExhausted':
      return onExhausted(value)
    case 'maxInFlight':
      return positiveInteger(value, 'maxInFlight', 10_000)
    case 'ratePerSecond':
      return ratePerSecond(value)
    case 'retrySchedule':
      return retrySchedule(value)
    case 'requestTimeoutMs':
      return positiveInteger(value, 'requestTimeoutMs', MAX_REQUEST_TIMEOUT_MS)
  }
}

function checkObject(input: unknown, what: string): Record<string, unknown> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    refuse(what, input, (spell) => `${spell(what)} must be an object`)
  }
  return input as Record<string, unknown>
}

function refuseUnknown(input: Record<string, unknown>, known: readonly string[]): void {
  for (const key of Object.keys(input)) {
    if (!known.includes(key)) {
      refuse(
        key,
        input[key],
        (spell) => `unknown option ${spell(key)}; known options are ${known.join(', ')}`,
      )
    }
  }
}

/** A subscription's input checked, with the secret to store (given, or generated). */
export function checkCreateInput(input: CreateSubscriptionInput): {
  settings: StoredSettings
  secret: string
  startAt: StartAt
} {
  const fields = checkObject(input, 'subscription')
  refuseUnknown(fields, [...SETTINGS, 'secret', 'startAt'])
  if (fields.url === undefined)
    refuse('url', undefined, (spell) => `${spell('url')} is required: the subscriber's URL`)
  if (fields.startAt !== undefined && fields.startAt !== 'now' && fields.startAt !== 'earliest') {
    refuse(
      'startAt',
      fields.startAt,
      (spell, got) =>
        `${spell('startAt')} must be 'now' (events committed from now on) or 'earliest' (every retained event first), got ${got}`,
    )
  }
  const settings: Record<string, unknown> = {}
  for (const key of SETTINGS) {
    if (fields[key] !== undefined) settings[key] = setting(key, fields[key], false)
  }
  return { settings, secret: checkSecret(fields.secret), startAt: (fields.startAt as StartAt) ?? 'now' }
}

/** Changes checked: only what is given, `null` to clear. */
export function checkChanges(changes: SubscriptionChanges): StoredSettings {
  const fields = checkObject(changes, 'changes')
  refuseUnknown(fields, SETTINGS)
  const settings: Record<string, unknown> = {}
  for (const key of SETTINGS) {
    if (fields[key] !== undefined) settings[key] = setting(key, fields[key], true)
  }
  if (Object.keys(settings).length === 0) {
    refuse('changes', changes, () => `nothing to change: give one of ${SETTINGS.join(', ')}`)
  }
  return settings
}

/** A given secret checked as a Standard Webhooks signing secret, or a new random one. */
export function checkSecret(secret: unknown): string {
  if (secret === undefined) return generateSecret()
  if (typeof secret !== 'string')
    refuse('secret', undefined, (spell) => `${spell('secret')} must be a string`)
  try {
    parseSigningSecrets(secret)
  } catch (error) {
    // The protocol's message names what is wrong and never shows the secret.
    refuse('secret', undefined, () => (error instanceof Error ? error.message : String(error)))
  }
  return secret
}

/** A new Standard Webhooks secret: `whsec_` and 32 random bytes in base64. */
export function generateSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`
}

/** Whether a reference is a subscription id (else it is a name). */
export function isSubscriptionId(ref: string): boolean {
  return isUuid(ref)
}
