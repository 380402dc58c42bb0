import { checkIntegrity, stats } from '@outbox/producer'
import { type Kysely, sql } from 'kysely'
import type { OrdersDatabase } from '../orders-service.js'
import type { SubscriberDatabase } from '../subscriber.js'
import type { FaultCounts } from './faults.js'

/** What the relays reported through their events, summed over all of them. */
export interface DeliveryCounts {
  /** Webhook requests made (each ends in success, retry or dead letter). */
  attempts: number
  /** 2xx answers whose body said `duplicate_ignored`. */
  duplicates: number
  /** `delivery:stale`: the consumer had already applied a later event of the order. */
  stale: number
  /** `delivery:dead`. */
  dead: number
}

/** The figures of one run; `lost`, `outOfOrder`, `appliedTwice` and `copiesDiffering` must be 0. */
export interface Summary {
  readonly ordersPlaced: number
  /** Events committed in the orders database (the outbox rows). */
  readonly eventsCreated: number
  readonly attempts: number
  readonly failedOnPurpose: number
  readonly droppedAfterCommit: number
  readonly duplicatesIgnored: number
  /** Distinct events the subscriber applied (rows of its timeline). */
  readonly applied: number
  readonly deadLettered: number
  readonly stale: number
  /** Events created − applied: committed events the subscriber never applied. */
  readonly lost: number
  /** Events applied after a later event of the same order. */
  readonly outOfOrder: number
  /** Events applied more than once. */
  readonly appliedTwice: number
  /** Orders whose status at the subscriber is not the orders service's. */
  readonly copiesDiffering: number
  /** Lanes that break a liveness rule (`checkIntegrity`): an aggregate that could never move again. */
  readonly stuckLanes: number
  /** Milliseconds from the producer's COMMIT returning to the subscriber writing the change. */
  readonly latencyP50Ms: number | undefined
  readonly latencyP99Ms: number | undefined
  readonly seconds: number
  /** Requests the orders service did not answer with 2xx. */
  readonly clientErrors: number
}

/** Everything {@link summarize} reads. */
export interface SummaryInput {
  readonly ordersDb: Kysely<OrdersDatabase>
  readonly subscriberDb: Kysely<SubscriberDatabase>
  readonly deliveries: DeliveryCounts
  readonly faults: FaultCounts
  /** Event id → wall-clock milliseconds when its transaction's COMMIT returned. */
  readonly commits: ReadonlyMap<string, number>
  readonly clientErrors: number
  readonly seconds: number
}

/** The nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]
}

/**
 * Checks the run against both databases: every committed event (the producer's outbox) against what the
 * subscriber applied (its timeline, written in the same transaction as each change), and every order against
 * the subscriber's copy of it. Nothing here trusts the relay's or the consumer's own bookkeeping.
 */
export async function summarize(input: SummaryInput): Promise<Summary> {
  const { ordersDb, subscriberDb } = input
  const created = await ordersDb.selectFrom('outbox').select('event_id').execute()
  const { dead } = await stats(ordersDb)
  const integrity = await checkIntegrity(ordersDb)
  const orders = await ordersDb.selectFrom('orders').select(['id', 'status']).execute()
  const timeline = await subscriberDb
    .selectFrom('order_timeline')
    .select([
      'event_id',
      'order_id',
      'sequence',
      sql<number>`(extract(epoch from applied_at) * 1000)::float8`.as('applied_ms'),
    ])
    .orderBy('id')
    .execute()
  const copies = await subscriberDb.selectFrom('order_copies').select(['order_id', 'status']).execute()

  const appliedAt = new Map<string, number>()
  const lastSequence = new Map<string, number>()
  let outOfOrder = 0
  let appliedTwice = 0
  for (const row of timeline) {
    if (appliedAt.has(row.event_id)) appliedTwice += 1
    else appliedAt.set(row.event_id, row.applied_ms)
    // Timeline ids are handed out in apply order within one order: the consumer serializes an order's events.
    const sequence = Number(row.sequence)
    const last = lastSequence.get(row.order_id) ?? 0
    if (sequence <= last) outOfOrder += 1
    else lastSequence.set(row.order_id, sequence)
  }
  let lost = 0
  const latencies: number[] = []
  for (const { event_id } of created) {
    const applied = appliedAt.get(event_id)
    if (applied === undefined) {
      lost += 1
      continue
    }
    const committed = input.commits.get(event_id)
    if (committed !== undefined) latencies.push(Math.max(0, applied - committed))
  }
  latencies.sort((a, b) => a - b)
  const copyStatus = new Map(copies.map((copy) => [copy.order_id, copy.status]))
  const copiesDiffering = orders.filter((order) => copyStatus.get(order.id) !== order.status).length

  return {
    ordersPlaced: orders.length,
    eventsCreated: created.length,
    attempts: input.deliveries.attempts,
    failedOnPurpose: input.faults.failed,
    droppedAfterCommit: input.faults.dropped,
    duplicatesIgnored: input.deliveries.duplicates,
    applied: appliedAt.size,
    deadLettered: dead,
    stale: input.deliveries.stale,
    lost,
    outOfOrder,
    appliedTwice,
    copiesDiffering,
    stuckLanes: new Set(integrity.violations.map((v) => `${v.aggregateType}:${v.aggregateId}`)).size,
    latencyP50Ms: percentile(latencies, 50),
    latencyP99Ms: percentile(latencies, 99),
    seconds: input.seconds,
    clientErrors: input.clientErrors,
  }
}

const count = (value: number) => value.toLocaleString('en-US')
const ms = (value: number | undefined) => (value === undefined ? '—' : `${value.toFixed(1)} ms`)

/** The summary as an aligned table: label, value, what it means. */
export function formatSummary(summary: Summary): string {
  const rows: [string, string, string][] = [
    ['orders placed', count(summary.ordersPlaced), ''],
    ['events created', count(summary.eventsCreated), 'committed with their change, in the outbox'],
    ['delivery attempts', count(summary.attempts), 'webhook requests the relays made'],
    ['  failed on purpose', count(summary.failedOnPurpose), 'answered 500 before anything ran'],
    ['  dropped after commit', count(summary.droppedAfterCommit), 'applied, then the answer was cut off'],
    ['duplicates ignored', count(summary.duplicatesIgnored), 'redeliveries the consumer recognised'],
    ['applied', count(summary.applied), 'events the subscriber applied'],
    ['dead-lettered', count(summary.deadLettered), 'attempts ran out (kept, redrivable)'],
    ['stale', count(summary.stale), 'arrived after a later event of its order'],
    ['lost', count(summary.lost), 'events created − applied'],
    ['out of order', count(summary.outOfOrder), 'applied after a later event of its order'],
    ['applied twice', count(summary.appliedTwice), ''],
    ['copies differing', count(summary.copiesDiffering), "subscriber's status ≠ orders service's"],
    ['stuck lanes', count(summary.stuckLanes), 'orders that could never move again (checkIntegrity)'],
    ['latency p50', ms(summary.latencyP50Ms), "producer's COMMIT → subscriber's apply"],
    ['latency p99', ms(summary.latencyP99Ms), ''],
    ['wall time', `${summary.seconds.toFixed(1)} s`, 'from the first order to the last delivery'],
  ]
  const labelWidth = Math.max(...rows.map(([label]) => label.length))
  const valueWidth = Math.max(...rows.map(([, value]) => value.length))
  return rows
    .map(([label, value, note]) =>
      `  ${label.padEnd(labelWidth)}  ${value.padStart(valueWidth)}  ${note}`.trimEnd(),
    )
    .join('\n')
}

/** Why the run failed, one sentence each; empty when it passed. */
export function failures(summary: Summary): string[] {
  const reasons: string[] = []
  if (summary.lost > 0) {
    const dead =
      summary.deadLettered > 0
        ? ` (${count(summary.deadLettered)} dead-lettered: with onExhausted 'skip' a dead letter lets its order move on — the guarantee's one reported exception; retry longer or redrive it)`
        : ''
    reasons.push(`${count(summary.lost)} committed event(s) were never applied${dead}`)
  }
  if (summary.outOfOrder > 0) reasons.push(`${count(summary.outOfOrder)} event(s) were applied out of order`)
  if (summary.appliedTwice > 0) reasons.push(`${count(summary.appliedTwice)} event(s) were applied twice`)
  if (summary.copiesDiffering > 0)
    reasons.push(`${count(summary.copiesDiffering)} order(s) differ between the two services`)
  if (summary.stuckLanes > 0)
    reasons.push(
      `${count(summary.stuckLanes)} order(s) break a liveness rule: run outbox doctor on the orders database`,
    )
  if (summary.clientErrors > 0)
    reasons.push(`the orders service refused ${count(summary.clientErrors)} request(s)`)
  return reasons
}
