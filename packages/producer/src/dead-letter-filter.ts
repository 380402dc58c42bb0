import { invalidOption } from './errors.js'
import { subscriptionIdOption } from './uuid-option.js'

/**
 * Which dead letters an operator means: every field narrows the set, all of them together (AND); an empty filter is
 * every dead letter. Taken by {@link listDeadLetters}, {@link redrive} and {@link discardDeadLetters}, so what a list
 * shows is exactly what the action with the same filter touches.
 */
export interface DeadLetterFilter {
  /** Only this subscription's dead letters (its id; the nil uuid for the implicit subscription). */
  readonly subscriptionId?: string
  /** Only events enqueued for this tenant. */
  readonly tenant?: string
  /**
   * Only this event type: exact (`'order.paid'`) or a prefix ending in `*` (`'order.*'`, `'*'`), as a subscription's
   * `eventTypes` entry matches.
   */
  readonly eventType?: string
  /** Only this aggregate's dead letters (with `aggregateId`: an aggregate is the pair). */
  readonly aggregateType?: string
  /** Only this aggregate's dead letters (with `aggregateType`). */
  readonly aggregateId?: string
  /** Only dead letters whose last attempt got this HTTP status (100–599). */
  readonly status?: number
  /** Only dead letters that died at or after this time. */
  readonly since?: Date
  /** Only dead letters that died before this time. */
  readonly until?: Date
}

/** A {@link DeadLetterFilter} checked and normalised (ids lower case), frozen; what the SQL modules take. */
export interface ResolvedDeadLetterFilter {
  readonly subscriptionId?: string | undefined
  readonly tenant?: string | undefined
  readonly eventType?: string | undefined
  readonly aggregate?: { readonly type: string; readonly id: string } | undefined
  readonly status?: number | undefined
  readonly since?: Date | undefined
  readonly until?: Date | undefined
}

/** Every field {@link DeadLetterFilter} has: anything else is a typo that would otherwise widen the set silently. */
const FIELDS: Readonly<Record<keyof DeadLetterFilter, true>> = {
  subscriptionId: true,
  tenant: true,
  eventType: true,
  aggregateType: true,
  aggregateId: true,
  status: true,
  since: true,
  until: true,
}

function text(name: string, value: unknown): string | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'string' || value === '') {
    throw invalidOption(name, value, (spell, got) => `${spell(name)} must be a non-empty string, got ${got}`)
  }
  return value
}

function date(name: string, value: unknown): Date | undefined {
  if (value === undefined) return undefined
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw invalidOption(
      name,
      value instanceof Date ? 'Invalid Date' : value,
      (spell, got) => `${spell(name)} must be a valid Date, got ${got}`,
    )
  }
  return value
}

/**
 * Checks a filter at the boundary: a uuid subscription id, an HTTP status as an integer from 100 to 599, valid
 * dates, an aggregate given as its type and id together; an unknown field is refused, since ignoring it would act
 * on more dead letters than asked. Errors are `ERR_OUTBOX_INVALID_OPTION` naming the field.
 */
export function deadLetterFilterOption(filter: DeadLetterFilter | undefined): ResolvedDeadLetterFilter {
  if (filter === undefined) return Object.freeze({})
  if (typeof filter !== 'object' || filter === null || Array.isArray(filter)) {
    throw invalidOption(
      'filter',
      filter,
      (spell, got) => `${spell('filter')} must be an object of dead-letter fields, got ${got}`,
    )
  }
  // A key set to undefined narrows nothing either way; only a given value under an unknown name is a typo to refuse.
  const unknown = Object.entries(filter)
    .filter(([key, value]) => !(key in FIELDS) && value !== undefined)
    .map(([key]) => key)
  if (unknown.length > 0) {
    throw invalidOption(
      unknown[0]!,
      (filter as Record<string, unknown>)[unknown[0]!],
      (spell) =>
        `${spell(unknown[0]!)} is not a dead-letter filter; use ${Object.keys(FIELDS)
          .map((key) => spell(key))
          .join(', ')}`,
    )
  }
  const { subscriptionId, status, aggregateType: type, aggregateId: id } = filter
  subscriptionIdOption(subscriptionId)
  if (status !== undefined && (!Number.isInteger(status) || status < 100 || status > 599)) {
    throw invalidOption(
      'status',
      status,
      (spell, got) => `${spell('status')} must be an HTTP status, an integer from 100 to 599, got ${got}`,
    )
  }
  if ((type === undefined) !== (id === undefined)) {
    const missing = type === undefined ? 'aggregateType' : 'aggregateId'
    throw invalidOption(
      missing,
      undefined,
      (spell) =>
        `give ${spell('aggregateType')} and ${spell('aggregateId')} together (an aggregate is the pair)`,
    )
  }
  const since = date('since', filter.since)
  const until = date('until', filter.until)
  if (since && until && since.getTime() >= until.getTime()) {
    throw invalidOption(
      'until',
      until.toISOString(),
      (spell, got) =>
        `${spell('until')} must be later than ${spell('since')} (${since.toISOString()}), got ${got}`,
    )
  }
  const aggregateType = text('aggregateType', type)
  const aggregateId = text('aggregateId', id)
  return Object.freeze({
    subscriptionId: subscriptionId?.toLowerCase(),
    tenant: text('tenant', filter.tenant),
    eventType: text('eventType', filter.eventType),
    aggregate:
      aggregateType === undefined || aggregateId === undefined
        ? undefined
        : { type: aggregateType, id: aggregateId },
    status,
    since,
    until,
  })
}

/** Whether a resolved filter narrows anything: an empty one is every dead letter. */
export function isEmptyFilter(filter: ResolvedDeadLetterFilter): boolean {
  return Object.values(filter).every((value) => value === undefined)
}

/** The filter as the audit log records it: plain JSON, dates as ISO text, only the fields given. */
export function filterForAudit(filter: ResolvedDeadLetterFilter): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  if (filter.subscriptionId !== undefined) out.subscriptionId = filter.subscriptionId
  if (filter.tenant !== undefined) out.tenant = filter.tenant
  if (filter.eventType !== undefined) out.eventType = filter.eventType
  if (filter.aggregate !== undefined) {
    out.aggregateType = filter.aggregate.type
    out.aggregateId = filter.aggregate.id
  }
  if (filter.status !== undefined) out.status = filter.status
  if (filter.since !== undefined) out.since = filter.since.toISOString()
  if (filter.until !== undefined) out.until = filter.until.toISOString()
  return out
}
