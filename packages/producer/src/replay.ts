import { setTimeout as delay } from 'node:timers/promises'
import { type Kysely, sql } from 'kysely'
import { actorOption, auditHost, recordAudit } from './audit.js'
import { type Duration, parseDuration } from './duration.js'
import { invalidOption, OutboxError } from './errors.js'
import { notifyChannel, resolveSchema } from './schema-name.js'
import { replaySent } from './sql/replay-sent.js'
import { type AggregateKey, selectReplayLanes } from './sql/select-replay-lanes.js'
import { getSubscription } from './subscriptions.js'

/** Progress of a {@link replay}, reported after every batch; the counts so far. */
export interface ReplayProgress {
  /** Lanes (aggregates) whose events are pending again. */
  readonly aggregates: number
  /** Events pending again. */
  readonly events: number
  /** Lanes found under a relay's lease, waiting to be tried again. */
  readonly pendingLeased: number
}

/** Options of {@link replay}. */
export interface ReplayOptions {
  /** The subscription to send again to: its id or its name (`'default'` for the relay's `endpoint`). */
  readonly subscriptionId: string
  /** Events created at or after this time: a `Date`, or a {@link Duration} meaning "that long ago" (`'2h'`). */
  readonly since: Date | Duration
  /** Events created before this time: a `Date` or a {@link Duration} ago. @defaultValue when the replay starts */
  readonly until?: Date | Duration
  /** Aggregates per batch; each batch is one short transaction. @defaultValue 100 */
  readonly batchSize?: number
  /**
   * How long to keep trying lanes a relay holds once every other lane is done; those left then are reported in
   * `skippedLeased`. @defaultValue 120000 (two default leases)
   */
  readonly leaseWaitMs?: number
  /** Called after every batch. */
  readonly onProgress?: (progress: ReplayProgress) => void
  /** Stops between batches when aborted (what was replayed stays replayed). */
  readonly signal?: AbortSignal
  /** @defaultValue 'public' */
  readonly schema?: string
  /** Who asks, for the audit log (one entry per replay, with what it did). @defaultValue 'api' */
  readonly actor?: string
}

/** What {@link replay} did. */
export interface ReplayResult {
  /** Lanes (aggregates) whose events are pending again. */
  readonly aggregates: number
  /** Events pending again. */
  readonly events: number
  /** Lanes not replayed because a relay still held them when `leaseWaitMs` ran out (or the signal stopped it). */
  readonly skippedLeased: number
  /** True when every lane in the range was replayed: nothing skipped, not stopped by the signal. */
  readonly complete: boolean
}

/** Default aggregates per {@link replay} batch. */
export const DEFAULT_REPLAY_BATCH_SIZE = 100
/** Default of {@link ReplayOptions.leaseWaitMs}: two default leases. */
export const DEFAULT_REPLAY_LEASE_WAIT_MS = 120_000
/** Pause between tries of leased lanes: a relay's default poll interval, the pace at which lanes change hands. */
const LEASED_RETRY_PAUSE_MS = 200
/** How often a batch chosen as a deadlock's victim starts again before the replay gives up. */
const DEADLOCK_RETRIES = 3

interface Resolved {
  readonly ref: string
  readonly since: Date | Duration
  readonly until: Date | Duration | undefined
  readonly batchSize: number
  readonly leaseWaitMs: number
}

function checkTime(value: unknown, name: string): Date | Duration {
  if (value instanceof Date) {
    if (!Number.isNaN(value.getTime())) return value
    throw invalidOption(name, String(value), (spell, got) => `${spell(name)} is an invalid Date (${got})`)
  }
  // A Duration: checked (and its message written) by the one parser every option uses.
  parseDuration(value as Duration, name)
  return value as Duration
}

function check(options: ReplayOptions): Resolved {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      "replay needs { subscriptionId, since }, e.g. replay(db, { subscriptionId: 'acme', since: '2h' })",
      { option: 'subscriptionId' },
    )
  }
  const ref = options.subscriptionId
  if (typeof ref !== 'string' || ref.length === 0) {
    throw invalidOption(
      'subscriptionId',
      ref,
      (spell, got) => `${spell('subscriptionId')} must be a subscription's id or name, got ${got}`,
    )
  }
  if (options.since === undefined) {
    throw invalidOption(
      'since',
      undefined,
      (spell) => `${spell('since')} is required: a Date, or how long ago such as '2h' or '7d'`,
    )
  }
  const batchSize = options.batchSize ?? DEFAULT_REPLAY_BATCH_SIZE
  if (!Number.isSafeInteger(batchSize) || batchSize <= 0 || batchSize > 10_000) {
    throw invalidOption(
      'batchSize',
      options.batchSize,
      (spell, got) =>
        `${spell('batchSize')} must be an integer from 1 to 10000 (aggregates per batch), got ${got}`,
    )
  }
  if (options.onProgress !== undefined && typeof options.onProgress !== 'function') {
    throw invalidOption(
      'onProgress',
      typeof options.onProgress,
      (spell, got) => `${spell('onProgress')} must be a function, got a ${got}`,
    )
  }
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw invalidOption(
      'signal',
      typeof options.signal,
      (spell, got) => `${spell('signal')} must be an AbortSignal, got a ${got}`,
    )
  }
  return {
    ref,
    since: checkTime(options.since, 'since'),
    until: options.until === undefined ? undefined : checkTime(options.until, 'until'),
    batchSize,
    leaseWaitMs: parseDuration(options.leaseWaitMs ?? DEFAULT_REPLAY_LEASE_WAIT_MS, 'leaseWaitMs'),
  }
}

/** A Date as given, or `now` (the database's) minus a duration. */
function pointInTime(value: Date | Duration, name: string, now: Date): Date {
  return value instanceof Date ? value : new Date(now.getTime() - parseDuration(value, name))
}

/**
 * Sends again, in order, every retained event of one subscription created since a time: each with its SAME event
 * id and sequence, so an ordered consumer answers those it already has `duplicate_ignored` and applies nothing twice.
 *
 * It puts the subscription's sent rows of the range back to pending, batch after batch (each `batchSize` aggregates,
 * one short transaction), while relays keep delivering; await it, or not, and follow `onProgress`. Per aggregate the
 * replayed events arrive in sequence order, and before any event of that aggregate still pending when they were
 * put back (see `replaySent` for the locks that make this hold against enqueues, redrives and claims). A lane a
 * relay holds is never touched while it does: it is tried again until the lease ends, for up to `leaseWaitMs`.
 *
 * What it does not send again: dead letters (send them with `redrive`), events of other subscriptions, and events
 * already pruned — a replay reaches back only as far as the retention of `prune`. During a replay `stats` counts
 * the replayed events as pending, and its lag is the oldest replayed event's age.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { replay } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { aggregates, events, complete } = await replay(db, {
 *   subscriptionId: 'acme',
 *   since: '2h',
 *   onProgress: ({ events }) => console.log(`${events} events pending again`),
 * })
 * ```
 */
export async function replay(db: Kysely<any>, options: ReplayOptions): Promise<ReplayResult> {
  const resolved = check(options)
  const actor = actorOption(options.actor)
  const schema = resolveSchema(options.schema)
  const subscription = await getSubscription(db, resolved.ref, { schema })
  if (!subscription) {
    throw new OutboxError(
      'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND',
      `no subscription ${JSON.stringify(resolved.ref)} (give its id or name; see outbox subscriptions list)`,
    )
  }
  // The database's clock, which wrote created_at: "2h ago" and the default end are read on it, not on this host's.
  const { rows } = await sql<{ now: Date }>`SELECT now() AS now`.execute(db)
  const now = rows[0]!.now
  const since = pointInTime(resolved.since, 'since', now)
  const until = resolved.until === undefined ? now : pointInTime(resolved.until, 'until', now)
  if (resolved.until === undefined && since.getTime() >= now.getTime()) {
    throw invalidOption(
      'since',
      since.toISOString(),
      (spell, got) =>
        `${spell('since')} (${got}) must be in the past (the database's clock reads ${now.toISOString()})`,
    )
  }
  if (until.getTime() <= since.getTime()) {
    throw invalidOption(
      'until',
      until.toISOString(),
      (spell, got) =>
        `${spell('until')} (${got}) must be later than ${spell('since')} (${since.toISOString()})`,
    )
  }

  const ctx = { db, schema }
  const range = { subscriptionId: subscription.id, since, until }
  const channel = notifyChannel(schema)
  let aggregates = 0
  let events = 0
  let leased: AggregateKey[] = []
  const batch = async (lanes: readonly AggregateKey[]): Promise<AggregateKey[]> => {
    const done = await retryingDeadlocks(() =>
      db.transaction().execute((trx) => replaySent({ db: trx, schema }, { ...range, lanes, channel })),
    )
    aggregates += done.lanes
    events += done.events
    return done.busy
  }
  const report = () => options.onProgress?.({ aggregates, events, pendingLeased: leased.length })

  // First pass: every aggregate of the range once, in index order.
  // One entry when the replay ends, however it ends: its batches are many transactions, and each stands on its own.
  const recorded = async (result: ReplayResult): Promise<ReplayResult> => {
    await recordAudit(ctx, {
      actor,
      action: 'events.replay',
      target: {
        subscription: subscription.id,
        name: subscription.name,
        host: auditHost(subscription.url),
        since: since.toISOString(),
        until: until.toISOString(),
      },
      result: { ...result },
    })
    return result
  }

  let after: AggregateKey | undefined
  for (;;) {
    if (options.signal?.aborted) {
      return await recorded({ aggregates, events, skippedLeased: leased.length, complete: false })
    }
    const lanes = await selectReplayLanes(ctx, { ...range, after, limit: resolved.batchSize })
    if (lanes.length === 0) break
    after = lanes[lanes.length - 1]
    leased.push(...(await batch(lanes)))
    report()
    if (lanes.length < resolved.batchSize) break
  }
  // Then the lanes relays held, again and again until each is free or the wait runs out.
  const deadline = Date.now() + resolved.leaseWaitMs
  while (leased.length > 0 && Date.now() < deadline && !options.signal?.aborted) {
    await delay(Math.min(LEASED_RETRY_PAUSE_MS, Math.max(0, deadline - Date.now())), undefined, {
      signal: options.signal,
    }).catch(() => {}) // an abort ends the pause early; the loop's condition then stops
    if (options.signal?.aborted) break
    const waiting = leased
    leased = []
    for (let start = 0; start < waiting.length; start += resolved.batchSize) {
      leased.push(...(await batch(waiting.slice(start, start + resolved.batchSize))))
    }
    report()
  }
  return await recorded({
    aggregates,
    events,
    skippedLeased: leased.length,
    complete: leased.length === 0 && !options.signal?.aborted,
  })
}

/**
 * Runs a batch again when PostgreSQL chose it as a deadlock's victim (40P01): it locks counters in sorted order as
 * `enqueueMany` does, but a transaction that enqueues for two aggregates one `enqueue` at a time, in the opposite
 * order, can still meet it — and the batch, not the application's transaction, should be the one to retry.
 */
async function retryingDeadlocks<T>(work: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work()
    } catch (error) {
      if ((error as { code?: unknown }).code !== '40P01' || attempt > DEADLOCK_RETRIES) throw error
    }
  }
}
