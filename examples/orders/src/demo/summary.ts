import { checkIntegrity } from '@outbox/producer'
import { type Kysely, sql } from 'kysely'
import type { OrdersDatabase } from '../orders-service.js'
import type { SubscriberDatabase } from '../subscriber.js'
import type { FaultCounts } from './faults.js'

/** What the relays reported through their events for one subscription, summed over all relays. */
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

/** One subscriber's figures; `lost`, `outOfOrder`, `appliedTwice` and `copiesDiffering` must be 0. */
export interface SubscriberSummary {
  readonly name: string
  /** Webhook requests the relays made to it. */
  readonly attempts: number
  readonly failedOnPurpose: number
  readonly droppedAfterCommit: number
  readonly duplicatesIgnored: number
  /** Distinct events it applied (rows of its timeline). */
  readonly applied: number
  /** Its subscription's outbox rows dead-lettered. */
  readonly deadLettered: number
  readonly stale: number
  /** Events created − applied: committed events this subscriber never applied. */
  readonly lost: number
  /** Events applied after a later event of the same order. */
  readonly outOfOrder: number
  /** Events applied more than once. */
  readonly appliedTwice: number
  /** Orders whose status at this subscriber is not the orders service's. */
  readonly copiesDiffering: number
  /** Milliseconds from the producer's COMMIT returning to this subscriber writing the change. */
  readonly latencyP50Ms: number | undefined
  readonly latencyP99Ms: number | undefined
}

/** The figures of one run: what all subscribers share, then each one's. */
export interface Summary {
  readonly ordersPlaced: number
  /** Distinct events committed in the orders database (each has one outbox row per subscription). */
  readonly eventsCreated: number
  /** Lanes that break a liveness rule (`checkIntegrity`), of any subscription: could never move again. */
  readonly stuckLanes: number
  readonly seconds: number
  /** Requests the orders service did not answer with 2xx. */
  readonly clientErrors: number
  readonly subscribers: readonly SubscriberSummary[]
}

/** What {@link summarize} reads about one subscriber. */
export interface SubscriberInput {
  readonly name: string
  /** Its subscription's id (`createSubscription`). */
  readonly subscriptionId: string
  /** Its own database. */
  readonly db: Kysely<SubscriberDatabase>
  /** What the relays reported for its subscription. */
  readonly deliveries: DeliveryCounts
  readonly faults: FaultCounts
}

/** Everything {@link summarize} reads. */
export interface SummaryInput {
  readonly ordersDb: Kysely<OrdersDatabase>
  readonly subscribers: readonly SubscriberInput[]
  /** Event id → wall-clock milliseconds when its transaction's COMMIT returned. */
  readonly commits: ReadonlyMap<string, number>
  readonly clientErrors: number
  readonly seconds: number
}

/**
 * The outbox column that says which subscription a row is for (migration 0008). The producer's exported table
 * types do not list it yet, so it is declared here for the one query that groups by it.
 */
type SubscriptionColumn = {
  outbox: { subscription_id: string }
}

/** The nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]
}

/**
 * Checks the run against the databases: every committed event (the producer's outbox) against what each
 * subscriber applied (its timeline, written in the same transaction as each change), and every order against
 * each subscriber's copy of it. Nothing here trusts the relay's or the consumer's own bookkeeping. Every
 * subscription wants every event, so an event a subscriber did not apply is lost to it, whether it was never
 * delivered or never recorded for its subscription.
 */
export async function summarize(input: SummaryInput): Promise<Summary> {
  const { ordersDb } = input
  const created = await ordersDb.selectFrom('outbox').select('event_id').distinct().execute()
  const deadRows = await ordersDb
    .withTables<SubscriptionColumn>()
    .selectFrom('outbox')
    .select(['subscription_id', (eb) => eb.fn.countAll<string>().as('dead')])
    .where('status', '=', 'dead')
    .groupBy('subscription_id')
    .execute()
  const deadBySubscription = new Map(deadRows.map((row) => [row.subscription_id, Number(row.dead)]))
  const integrity = await checkIntegrity(ordersDb)
  const orders = await ordersDb.selectFrom('orders').select(['id', 'status']).execute()

  const subscribers: SubscriberSummary[] = []
  for (const subscriber of input.subscribers) {
    subscribers.push(
      await summarizeSubscriber(subscriber, {
        created,
        orders,
        commits: input.commits,
        deadLettered: deadBySubscription.get(subscriber.subscriptionId) ?? 0,
      }),
    )
  }
  return {
    ordersPlaced: orders.length,
    eventsCreated: created.length,
    stuckLanes: new Set(integrity.violations.map((v) => `${v.aggregateType}:${v.aggregateId}`)).size,
    seconds: input.seconds,
    clientErrors: input.clientErrors,
    subscribers,
  }
}

/** One subscriber's figures, from its own database and what the orders database holds. */
async function summarizeSubscriber(
  subscriber: SubscriberInput,
  producer: {
    readonly created: readonly { event_id: string }[]
    readonly orders: readonly { id: string; status: string }[]
    readonly commits: ReadonlyMap<string, number>
    readonly deadLettered: number
  },
): Promise<SubscriberSummary> {
  const timeline = await subscriber.db
    .selectFrom('order_timeline')
    .select([
      'event_id',
      'order_id',
      'sequence',
      sql<number>`(extract(epoch from applied_at) * 1000)::float8`.as('applied_ms'),
    ])
    .orderBy('id')
    .execute()
  const copies = await subscriber.db.selectFrom('order_copies').select(['order_id', 'status']).execute()

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
  for (const { event_id } of producer.created) {
    const applied = appliedAt.get(event_id)
    if (applied === undefined) {
      lost += 1
      continue
    }
    const committed = producer.commits.get(event_id)
    if (committed !== undefined) latencies.push(Math.max(0, applied - committed))
  }
  latencies.sort((a, b) => a - b)
  const copyStatus = new Map(copies.map((copy) => [copy.order_id, copy.status]))
  const copiesDiffering = producer.orders.filter((order) => copyStatus.get(order.id) !== order.status).length

  return {
    name: subscriber.name,
    attempts: subscriber.deliveries.attempts,
    failedOnPurpose: subscriber.faults.failed,
    droppedAfterCommit: subscriber.faults.dropped,
    duplicatesIgnored: subscriber.deliveries.duplicates,
    applied: appliedAt.size,
    deadLettered: producer.deadLettered,
    stale: subscriber.deliveries.stale,
    lost,
    outOfOrder,
    appliedTwice,
    copiesDiffering,
    latencyP50Ms: percentile(latencies, 50),
    latencyP99Ms: percentile(latencies, 99),
  }
}

const count = (value: number) => value.toLocaleString('en-US')
const ms = (value: number | undefined) => (value === undefined ? '—' : `${value.toFixed(1)} ms`)

type Row = readonly [label: string, values: readonly string[], note: string]

/**
 * The summary as aligned tables: first the figures all subscribers share, then one column per subscriber, each
 * row with what it means.
 */
export function formatSummary(summary: Summary): string {
  const shared: Row[] = [
    ['orders placed', [count(summary.ordersPlaced)], ''],
    [
      'events created',
      [count(summary.eventsCreated)],
      'committed with their change: an outbox row per subscriber',
    ],
    [
      'stuck lanes',
      [count(summary.stuckLanes)],
      'lanes that could never move again, any subscriber (checkIntegrity)',
    ],
    ['wall time', [`${summary.seconds.toFixed(1)} s`], 'from the first order to the last delivery'],
  ]
  const each = (figure: (subscriber: SubscriberSummary) => string) => summary.subscribers.map(figure)
  const perSubscriber: Row[] = [
    ['delivery attempts', each((s) => count(s.attempts)), 'webhook requests the relays made'],
    ['  failed on purpose', each((s) => count(s.failedOnPurpose)), 'answered 500 before anything ran'],
    [
      '  dropped after commit',
      each((s) => count(s.droppedAfterCommit)),
      'applied, then the answer was cut off',
    ],
    ['duplicates ignored', each((s) => count(s.duplicatesIgnored)), 'redeliveries the consumer recognised'],
    ['applied', each((s) => count(s.applied)), 'events the subscriber applied'],
    ['dead-lettered', each((s) => count(s.deadLettered)), 'attempts ran out (kept, redrivable)'],
    ['stale', each((s) => count(s.stale)), 'arrived after a later event of its order'],
    ['lost', each((s) => count(s.lost)), 'events created − applied'],
    ['out of order', each((s) => count(s.outOfOrder)), 'applied after a later event of its order'],
    ['applied twice', each((s) => count(s.appliedTwice)), ''],
    ['copies differing', each((s) => count(s.copiesDiffering)), "subscriber's status ≠ orders service's"],
    ['latency p50', each((s) => ms(s.latencyP50Ms)), "producer's COMMIT → subscriber's apply"],
    ['latency p99', each((s) => ms(s.latencyP99Ms)), ''],
  ]
  const names = summary.subscribers.map((subscriber) => subscriber.name)
  const labelWidth = Math.max(...[...shared, ...perSubscriber].map(([label]) => label.length))
  // Column i fits its subscriber's name and figures; the first also fits the shared figures, printed under it.
  const widths = names.map((name, index) =>
    Math.max(
      name.length,
      ...perSubscriber.map(([, values]) => values[index]?.length ?? 0),
      ...(index === 0 ? shared.map(([, values]) => values[0]?.length ?? 0) : []),
    ),
  )
  const line = (label: string, values: readonly string[], note: string) =>
    `  ${label.padEnd(labelWidth)}  ${values.map((value, index) => value.padStart(widths[index] ?? 0)).join('  ')}  ${note}`.trimEnd()
  return [
    ...shared.map(([label, values, note]) => line(label, values, note)),
    '',
    line('', names, ''),
    ...perSubscriber.map(([label, values, note]) => line(label, values, note)),
  ].join('\n')
}

/** Why the run failed, one sentence each, naming the subscriber; empty when it passed. */
export function failures(summary: Summary): string[] {
  const reasons: string[] = []
  for (const subscriber of summary.subscribers) {
    const name = `${subscriber.name}: `
    if (subscriber.lost > 0) {
      const dead =
        subscriber.deadLettered > 0
          ? ` (${count(subscriber.deadLettered)} dead-lettered: with onExhausted 'skip' a dead letter lets its order move on — the guarantee's one reported exception; retry longer or redrive it)`
          : ''
      reasons.push(`${name}${count(subscriber.lost)} committed event(s) were never applied${dead}`)
    }
    if (subscriber.outOfOrder > 0)
      reasons.push(`${name}${count(subscriber.outOfOrder)} event(s) were applied out of order`)
    if (subscriber.appliedTwice > 0)
      reasons.push(`${name}${count(subscriber.appliedTwice)} event(s) were applied twice`)
    if (subscriber.copiesDiffering > 0)
      reasons.push(`${name}${count(subscriber.copiesDiffering)} order(s) differ from the orders service's`)
  }
  if (summary.stuckLanes > 0)
    reasons.push(
      `${count(summary.stuckLanes)} order(s) break a liveness rule: run outbox doctor on the orders database`,
    )
  if (summary.clientErrors > 0)
    reasons.push(`the orders service refused ${count(summary.clientErrors)} request(s)`)
  return reasons
}
