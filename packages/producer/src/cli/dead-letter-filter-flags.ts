import { isUuid } from '@outbox/protocol'
import type { Kysely } from 'kysely'
import type { DeadLetterFilter } from '../dead-letter-filter.js'
import { aggregateFlag } from './aggregate-flag.js'
import { UsageError } from './cli-error.js'
import type { Producer } from './load-producer.js'
import { durationFlag, numberFlag } from './parse-flags.js'

/** The filter flags `outbox dead-letters list|redrive|discard` share. */
export const DEAD_LETTER_FILTER_FLAGS = {
  subscription: { type: 'string' },
  tenant: { type: 'string' },
  'event-type': { type: 'string' },
  aggregate: { type: 'string' },
  status: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
} as const

/** The filter flags as parsed: each a string when given. */
export interface FilterFlagValues {
  readonly subscription?: string | undefined
  readonly tenant?: string | undefined
  readonly 'event-type'?: string | undefined
  readonly aggregate?: string | undefined
  readonly status?: string | undefined
  readonly since?: string | undefined
  readonly until?: string | undefined
}

const ISO_TIME = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$/

/** Whether any filter flag was given (`--subscription` included). */
export function hasFilterFlags(values: FilterFlagValues): boolean {
  return Object.keys(DEAD_LETTER_FILTER_FLAGS).some(
    (flag) => values[flag as keyof FilterFlagValues] !== undefined,
  )
}

/**
 * `--since`/`--until`: a duration ago (`2h`, `7d`, with the protocol's one parser) or an ISO time
 * (`2026-01-10T12:00:00Z`, or a date alone, taken as UTC midnight).
 */
function timeFlag(value: string | undefined, flag: string, now: number): Date | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  if (ISO_TIME.test(text)) {
    const time = new Date(text)
    if (!Number.isNaN(time.getTime())) return time
  } else if (/^\d+(\.\d+)?\s*(ms|s|m|h|d|w)$/.test(text)) {
    return new Date(now - (durationFlag(text, flag) ?? 0))
  }
  throw new UsageError(
    `--${flag} takes a duration ago (e.g. 2h, 7d) or an ISO time (e.g. 2026-01-10T12:00:00Z); got ${JSON.stringify(value)}`,
  )
}

/**
 * The filter the flags give, checked before connecting (the subscription is resolved later: a name needs the
 * database). `--aggregate` is `type/id` (see {@link aggregateFlag}).
 */
export function filterFromFlags(values: FilterFlagValues, now = Date.now()): DeadLetterFilter {
  const filter: {
    -readonly [K in keyof DeadLetterFilter]: DeadLetterFilter[K]
  } = {}
  if (values.tenant !== undefined) filter.tenant = values.tenant
  if (values['event-type'] !== undefined) filter.eventType = values['event-type']
  const aggregate = aggregateFlag(values.aggregate)
  if (aggregate !== undefined) {
    filter.aggregateType = aggregate.aggregateType
    filter.aggregateId = aggregate.aggregateId
  }
  if (values.status !== undefined) filter.status = numberFlag(values.status)
  const since = timeFlag(values.since, 'since', now)
  const until = timeFlag(values.until, 'until', now)
  if (since) filter.since = since
  if (until) filter.until = until
  return filter
}

/**
 * `--subscription` as the library takes it, for every command that has the flag: a uuid as it is (dead letters and
 * the delivery log outlive a deleted subscription, which stays addressable by id); a name looked up.
 */
export async function subscriptionFromFlag(
  producer: Producer,
  db: Kysely<any>,
  ref: string | undefined,
  schema: string | undefined,
): Promise<string | undefined> {
  if (ref === undefined || isUuid(ref)) return ref
  const found = await producer.getSubscription(db, ref, { schema })
  if (!found) throw new UsageError(`no subscription ${JSON.stringify(ref)} (see outbox subscriptions list)`)
  return found.id
}
