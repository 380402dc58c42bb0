import { IMPLICIT } from './model-sink.js'

/** What the model knows of one subscription's routing, as its last committed change left it. */
export interface Route {
  /** Null: every tenant's events and those without one; else only that tenant's. */
  readonly tenant: string | null
  /** Null: every type; else exact types or prefixes ending in `*`. */
  readonly eventTypes: readonly string[] | null
  readonly enabled: boolean
}

/** The implicit subscription as a fresh outbox has it: every event, enabled. */
export const IMPLICIT_ROUTE: Route = Object.freeze({ tenant: null, eventTypes: null, enabled: true })

/** Whether a type filter (null: every type; else exact types or `*`-prefixes) takes an event type. */
function typeMatches(filter: readonly string[] | null, eventType: string): boolean {
  if (filter === null) return true
  return filter.some((entry) =>
    entry.endsWith('*') ? eventType.startsWith(entry.slice(0, -1)) : entry === eventType,
  )
}

/**
 * The subscriptions an event is routed to, by the rules of the producer's README written down independently of its
 * SQL: the implicit subscription while it is enabled; every stored one, enabled or paused (a paused subscription
 * keeps receiving its rows); a tenant filter takes only that tenant's events (an event without a tenant goes only to
 * subscriptions without one); a type filter takes exact types and `*`-prefixes.
 */
export function routeEvent(
  routes: ReadonlyMap<string, Route>,
  event: { readonly eventType: string; readonly tenant: string | null },
): string[] {
  const routed: string[] = []
  for (const [key, route] of routes) {
    if (key === IMPLICIT && !route.enabled) continue
    if (!filterTakes(route, event)) continue
    routed.push(key)
  }
  return routed.sort()
}

/**
 * Whether a subscription's filter takes an event, whatever its state: a tenant filter only that tenant's events (an
 * event without a tenant only when the subscription has none either), a type filter its exact types and prefixes.
 */
export function filterTakes(
  filter: { readonly tenant: string | null; readonly eventTypes: readonly string[] | null },
  event: { readonly eventType: string; readonly tenant: string | null },
): boolean {
  if (filter.tenant !== null && filter.tenant !== event.tenant) return false
  return typeMatches(filter.eventTypes, event.eventType)
}
