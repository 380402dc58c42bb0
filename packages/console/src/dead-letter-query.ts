import { type DeadLetterFilter, parseDuration } from '@outbox/producer'

/** The dead-letter filter as the form and the query string carry it: raw text, empty fields absent. */
export interface DeadLetterQuery {
  readonly subscription?: string
  readonly tenant?: string
  readonly eventType?: string
  readonly aggregateType?: string
  readonly aggregateId?: string
  readonly status?: string
  /** A duration ago (`2h`, `30m`) or an ISO time. */
  readonly since?: string
}

/** The query's field names, in form order. */
export const DEAD_LETTER_QUERY_FIELDS = [
  'subscription',
  'tenant',
  'eventType',
  'aggregateType',
  'aggregateId',
  'status',
  'since',
] as const

/** Reads the filter fields from a query string or a form body; anything else is ignored. */
export function readDeadLetterQuery(source: unknown): DeadLetterQuery {
  const query: Record<string, string> = {}
  for (const name of DEAD_LETTER_QUERY_FIELDS) {
    const value = (source as Record<string, unknown> | undefined)?.[name]
    const one = Array.isArray(value) ? value[0] : value
    if (typeof one === 'string' && one.trim() !== '') query[name] = one.trim()
  }
  return query
}

/** Whether any filter field is set: the bulk actions need one, so nothing is ever discarded by accident. */
export function hasFilter(query: DeadLetterQuery): boolean {
  return Object.keys(query).length > 0
}

/**
 * The producer's filter for a query. Values are passed on as typed (a status that is not a number stays NaN, a
 * time that does not parse stays an invalid Date): the producer checks them and names the field, and the page
 * shows its message.
 */
export function toDeadLetterFilter(query: DeadLetterQuery, now = Date.now()): DeadLetterFilter {
  let since: Date | undefined
  if (query.since !== undefined) {
    try {
      since = new Date(now - parseDuration(query.since, 'since'))
    } catch {
      since = new Date(query.since)
    }
  }
  return {
    subscriptionId: query.subscription,
    tenant: query.tenant,
    eventType: query.eventType,
    aggregateType: query.aggregateType,
    aggregateId: query.aggregateId,
    status: query.status === undefined ? undefined : Number(query.status),
    since,
  }
}
