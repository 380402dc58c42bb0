import type { Kysely } from 'kysely'
import { actorOption, recordAudit } from './audit.js'
import { invalidOption, OutboxError } from './errors.js'
import { pageLimit } from './keyset-cursor.js'
import { resolveSchema } from './schema-name.js'
import { clearConflictPark } from './sql/clear-conflict-park.js'
import { describeLane, type LaneKey, lockLaneForAction, releaseBlockedLane } from './sql/lock-lane.js'
import { type LaneRow, selectLanes } from './sql/select-lanes.js'
import { skipLaneHead as skipHead } from './sql/skip-lane-head.js'
import { STRUGGLING_ATTEMPTS } from './stats.js'
import { subscriptionIdOption } from './uuid-option.js'

/**
 * The states {@link listLanes} finds lanes in: `blocked` (parked by an exhausted event under `'block'`, or by a 409),
 * `struggling` (not blocked, its head failed 3 or more times and is still retried), `leased` (a relay holds it
 * under a live lease right now).
 */
export type LaneState = 'blocked' | 'struggling' | 'leased'

/** A lane's head: its pending event with the lowest sequence, the next one a relay sends. */
export interface LaneHead {
  readonly eventId: string
  readonly sequence: number
  readonly eventType: string
  readonly attempts: number
  /** HTTP status of the last attempt, or null for none yet, a timeout, a network error or a lost lease. */
  readonly lastStatus: number | null
  readonly lastError: string | null
  readonly lastAttemptAt: Date | null
  /** When it is due; null when it is parked at `'infinity'` behind a block. */
  readonly availableAt: Date | null
}

/** One lane — one subscription's view of one aggregate — as an operator looks at it. */
export interface LaneSummary {
  /** The nil uuid for the implicit subscription (the relay's `endpoint`). */
  readonly subscriptionId: string
  /** Its name (`default` for the implicit one); null for a nameless or deleted subscription. */
  readonly subscriptionName: string | null
  readonly aggregateType: string
  readonly aggregateId: string
  /** The state it was listed for. */
  readonly state: LaneState
  /** Why it is blocked: an exhausted event under `'block'`, or a 409 park; null when it is not. */
  readonly reason: 'exhausted' | 'conflict' | null
  readonly blockedAt: Date | null
  /** The end of a live lease; null when no relay holds it. */
  readonly leasedUntil: Date | null
  /** Its pending events. */
  readonly pending: number
  /** Null when nothing is pending. */
  readonly head: LaneHead | null
  /** For reason 'exhausted': the dead letter that blocks the lane */
  readonly blocker: {
    readonly eventId: string
    readonly sequence: number
    readonly lastStatus: number | null
    readonly lastError: string | null
  } | null
}

/** Options of {@link listLanes}. */
export interface ListLanesOptions {
  /** Which lanes: `'blocked'`, `'struggling'` or `'leased'`. */
  readonly state: LaneState
  /** Only this subscription's lanes (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  /** Only lanes of this aggregate type. */
  readonly aggregateType?: string
  /** Only lanes of this aggregate id. */
  readonly aggregateId?: string
  /** Most lanes returned. @defaultValue 100 */
  readonly limit?: number
  /** @defaultValue 'public' */
  readonly schema?: string
}

/** Which lane {@link unblockLane} and {@link skipLaneHead} act on, and who asks. */
export interface LaneActionOptions {
  /** The lane's subscription (its id; the nil uuid for the implicit one). */
  readonly subscriptionId: string
  readonly aggregateType: string
  readonly aggregateId: string
  /** Who acts, as the audit log records it. @defaultValue 'api' */
  readonly actor?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/** Options of {@link skipLaneHead}. */
export interface SkipLaneHeadOptions extends LaneActionOptions {
  /** Why, kept in the skipped event's `lastError` and in the audit log. */
  readonly reason?: string
}

/** What {@link unblockLane} did. */
export interface UnblockLaneResult {
  /** `resumed`: an exhausted block lifted; `conflict-cleared`: a 409 park ended. */
  readonly outcome: 'resumed' | 'conflict-cleared'
  /** Pending events made due now. */
  readonly released: number
  /** For `resumed`: the dead letter that blocked the lane (it stays dead and redrivable). */
  readonly blockerEventId: string | null
}

/** What {@link skipLaneHead} did. */
export interface SkipLaneHeadResult {
  /** The skipped event, now a dead letter. */
  readonly eventId: string
  readonly sequence: number
  /** Pending events behind it, now due. */
  readonly released: number
}

const STATES: readonly LaneState[] = ['blocked', 'struggling', 'leased']
/** Longest `reason` kept: it goes into the event's `last_error` and the audit row. */
const MAX_REASON_LENGTH = 500

/** A lane's subscription id: required where an action names one lane, optional where it filters. */
function laneSubscriptionId(id: unknown, required: boolean): string | undefined {
  // undefined where one is required is refused with the same message as a malformed one.
  return subscriptionIdOption(required && id === undefined ? null : id)
}

function textOption(value: unknown, option: string, required: boolean): string | undefined {
  if (value === undefined && !required) return undefined
  if (typeof value !== 'string' || value === '') {
    throw invalidOption(
      option,
      value,
      (name, got) => `${name(option)} must be a non-empty string, got ${got}`,
    )
  }
  return value
}

/** Checks the lane an action names; every part is required. */
function laneKey(options: LaneActionOptions): LaneKey {
  if (typeof options !== 'object' || options === null) {
    throw invalidOption(
      'subscriptionId',
      options,
      () => 'name the lane: { subscriptionId, aggregateType, aggregateId }',
    )
  }
  return {
    subscriptionId: laneSubscriptionId(options.subscriptionId, true)!,
    aggregateType: textOption(options.aggregateType, 'aggregateType', true)!,
    aggregateId: textOption(options.aggregateId, 'aggregateId', true)!,
  }
}

function toSummary(row: LaneRow, state: LaneState): LaneSummary {
  return {
    subscriptionId: row.subscription_id,
    subscriptionName: row.subscription_name,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    state,
    reason: row.blocked_reason,
    blockedAt: row.blocked_at,
    leasedUntil: row.leased_until,
    pending: Number(row.pending),
    head:
      row.head_event_id === null
        ? null
        : {
            eventId: row.head_event_id,
            sequence: Number(row.head_sequence),
            eventType: row.head_event_type!,
            attempts: row.head_attempts!,
            lastStatus: row.head_last_status,
            lastError: row.head_last_error,
            lastAttemptAt: row.head_last_attempt_at,
            availableAt: row.head_available_at,
          },
    blocker:
      row.blocker_event_id === null
        ? null
        : {
            eventId: row.blocker_event_id,
            sequence: Number(row.blocker_sequence),
            lastStatus: row.blocker_last_status,
            lastError: row.blocker_last_error,
          },
  }
}

/**
 * Lists the lanes that need a look, in one state: `blocked` (oldest block first: an exhausted event under
 * `'block'`, with the dead letter that blocks it, or a 409 park), `struggling` (head with the most attempts first;
 * the same lanes `stats().struggling` counts) or `leased` (the lease that ends first first). Each comes with its
 * head and pending count, read in one snapshot. Read-only.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listLanes } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const lane of await listLanes(db, { state: 'blocked' })) {
 *   console.log(lane.aggregateType, lane.aggregateId, lane.reason, lane.blocker?.lastError ?? lane.head?.lastError)
 * }
 * ```
 */
export async function listLanes(db: Kysely<any>, options: ListLanesOptions): Promise<LaneSummary[]> {
  const state = options?.state
  if (!STATES.includes(state)) {
    throw invalidOption(
      'state',
      state,
      (name, got) => `${name('state')} must be one of ${STATES.join(', ')}, got ${got}`,
    )
  }
  const limit = pageLimit(options.limit)
  const rows = await selectLanes(
    { db, schema: resolveSchema(options.schema) },
    {
      state,
      subscriptionId: laneSubscriptionId(options.subscriptionId, false),
      aggregateType: textOption(options.aggregateType, 'aggregateType', false),
      aggregateId: textOption(options.aggregateId, 'aggregateId', false),
      limit,
      strugglingAttempts: STRUGGLING_ATTEMPTS,
    },
  )
  return rows.map((row) => toSummary(row, state))
}

/**
 * Unblocks a lane, in one transaction that takes it like a redrive (the aggregate's counter, so no enqueue of it is
 * open, then the lane, so no claim of it runs; refused under a live lease with `ERR_OUTBOX_LANE_LEASED`):
 *
 * - blocked by an exhausted event under `'block'`: the lane resumes as if that dead letter (its blocker) had been
 *   skipped — the events behind it become due, in order. The dead letter stays dead, listed and redrivable. An
 *   event an enqueue wrote behind the block while the unblock waited for it is released too.
 * - parked by a 409: the park ends and its head is due now (the park's backoff starts over).
 *
 * A lane that is not blocked fails with `ERR_OUTBOX_LANE_NOT_FOUND`. Recorded in the audit log as `lane.unblock`,
 * in the same transaction.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { unblockLane } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { outcome, released } = await unblockLane(db, {
 *   subscriptionId: '00000000-0000-0000-0000-000000000000',
 *   aggregateType: 'order',
 *   aggregateId: '42',
 *   actor: 'alice',
 * })
 * ```
 */
export async function unblockLane(db: Kysely<any>, options: LaneActionOptions): Promise<UnblockLaneResult> {
  const key = laneKey(options)
  const actor = actorOption(options.actor)
  const schema = resolveSchema(options.schema)
  return await db.transaction().execute(async (trx) => {
    const ctx = { db: trx, schema }
    const { blockedReason } = await lockLaneForAction(ctx, key)
    let result: UnblockLaneResult
    if (blockedReason === 'exhausted') {
      // Read under the locks: the blocker is the dead row with the highest sequence, as redrive defines it.
      const blocker = await trx
        .withSchema(schema)
        .selectFrom('outbox')
        .select('event_id')
        .where('subscription_id', '=', key.subscriptionId)
        .where('aggregate_type', '=', key.aggregateType)
        .where('aggregate_id', '=', key.aggregateId)
        .where('status', '=', 'dead')
        .orderBy('sequence', 'desc')
        .limit(1)
        .executeTakeFirst()
      const released = await releaseBlockedLane(ctx, key)
      result = { outcome: 'resumed', released, blockerEventId: blocker?.event_id ?? null }
    } else if (blockedReason === 'conflict') {
      const released = await clearConflictPark(ctx, key)
      result = { outcome: 'conflict-cleared', released, blockerEventId: null }
    } else {
      throw new OutboxError('ERR_OUTBOX_LANE_NOT_FOUND', `lane ${describeLane(key)} is not blocked`)
    }
    await recordAudit(ctx, { actor, action: 'lane.unblock', target: { ...key }, result: { ...result } })
    return result
  })
}

/**
 * Gives up on a lane's head by an operator's decision, in one transaction that takes the lane like
 * {@link unblockLane}: the head becomes a dead letter (listed by `listDeadLetters`, redrivable by `redrive`, its
 * `lastError` saying `skipped by <actor>: <reason>`) and the lane moves on as under `onExhausted: 'skip'` — the
 * events behind it are due now, in order, and a 409 park ends. For a head that will never succeed (a payload the
 * consumer rejects for good) or a consumer that waits for an event it will never get.
 *
 * Refused with `ERR_OUTBOX_REFUSED` on a lane blocked by an exhausted event (skipping its next event would bend the
 * order `'block'` promises: unblock it or redrive its blocker), with `ERR_OUTBOX_LANE_LEASED` under a live lease,
 * and with `ERR_OUTBOX_LANE_NOT_FOUND` when nothing is pending. Recorded in the audit log as `lane.skip-head`.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { skipLaneHead } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { eventId, sequence } = await skipLaneHead(db, {
 *   subscriptionId: '00000000-0000-0000-0000-000000000000',
 *   aggregateType: 'order',
 *   aggregateId: '42',
 *   reason: 'consumer rejects this payload for good (TICKET-123)',
 *   actor: 'alice',
 * })
 * ```
 */
export async function skipLaneHead(
  db: Kysely<any>,
  options: SkipLaneHeadOptions,
): Promise<SkipLaneHeadResult> {
  const key = laneKey(options)
  const actor = actorOption(options.actor)
  const reason = textOption(options.reason, 'reason', false)
  if (reason !== undefined && reason.length > MAX_REASON_LENGTH) {
    throw invalidOption(
      'reason',
      reason,
      (name) => `${name('reason')} must be at most ${MAX_REASON_LENGTH} characters`,
    )
  }
  const schema = resolveSchema(options.schema)
  return await db.transaction().execute(async (trx) => {
    const ctx = { db: trx, schema }
    const { blockedReason } = await lockLaneForAction(ctx, key)
    if (blockedReason === 'exhausted') {
      throw new OutboxError(
        'ERR_OUTBOX_REFUSED',
        `lane ${describeLane(key)} is blocked by a dead letter under onExhausted 'block': skipping its head would deliver past it; unblock it first or redrive its blocker`,
      )
    }
    const error = `skipped by ${actor}${reason === undefined ? '' : `: ${reason}`}`
    const skipped = await skipHead(ctx, key, { error })
    if (!skipped) {
      throw new OutboxError('ERR_OUTBOX_LANE_NOT_FOUND', `lane ${describeLane(key)} has nothing pending`)
    }
    await recordAudit(ctx, {
      actor,
      action: 'lane.skip-head',
      target: { ...key },
      result: { ...skipped, reason: reason ?? null },
    })
    return skipped
  })
}
