import type { Kysely } from 'kysely'
import { actorOption, recordAudit } from './audit.js'
import { type DeadLetterFilter, deadLetterFilterOption, filterForAudit } from './dead-letter-filter.js'
import { eventIdsOption } from './dead-letters.js'
import { OutboxError } from './errors.js'
import { inTransactionRetryingDeadlocks } from './retry-deadlocks.js'
import { resolveSchema } from './schema-name.js'
import { type DiscardableRow, deleteDeadRows, lockCounters, selectDiscardable } from './sql/discard-dead.js'
import { describeLane, type LaneKey, lockLaneForAction, releaseBlockedLane } from './sql/lock-lane.js'
import type { DeadLetterSelection } from './sql/redrive-dead.js'
import { subscriptionIdOption } from './uuid-option.js'

/** Which dead letters {@link discardDeadLetters} deletes, and how. Exactly one of `eventIds` and `filter`. */
export interface DiscardOptions {
  /** These events' dead letters (in every subscription where they are dead, unless `subscriptionId` names one). */
  readonly eventIds?: readonly string[]
  /** The dead letters this filter picks (as {@link listDeadLetters} lists them). */
  readonly filter?: DeadLetterFilter
  /** Only this subscription's dead letters (its id). @defaultValue every subscription's */
  readonly subscriptionId?: string
  /** Report what would be discarded and unblocked, and change nothing. @defaultValue false */
  readonly dryRun?: boolean
  /**
   * Allow discarding a lane's BLOCKER: its lane is resumed first, as if that dead letter had been skipped (the rows
   * it parked become due, in order). Without it such a discard is refused. @defaultValue false
   */
  readonly unblockLanes?: boolean
  /** Who asks, as the audit log records it. @defaultValue 'api' */
  readonly actor?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/** A lane {@link discardDeadLetters} resumed because its blocker was discarded. */
export interface UnblockedLane {
  readonly subscriptionId: string
  readonly aggregateType: string
  readonly aggregateId: string
  /** Rows the block had parked that became due (would become, in a dry run). */
  readonly released: number
}

/** What {@link discardDeadLetters} did (or, with `dryRun`, would do). */
export interface DiscardResult {
  readonly dryRun: boolean
  /** Each deleted dead letter: an event dead in two subscriptions is listed twice. */
  readonly discarded: { readonly eventId: string; readonly subscriptionId: string }[]
  readonly unblocked: UnblockedLane[]
  /** Requested ids that were not dead letters (unknown, pending or sent), left unchanged; empty for a filter. */
  readonly notDead: string[]
}

/** How many blockers a refusal names; the rest are counted. */
const NAMED_BLOCKERS = 5

/** Lanes in the order every action locks them: subscription, then type and id in byte order (`COLLATE "C"`). */
function compareLanes(a: LaneKey, b: LaneKey): number {
  return (
    compareBytes(a.subscriptionId, b.subscriptionId) ||
    compareBytes(a.aggregateType, b.aggregateType) ||
    compareBytes(a.aggregateId, b.aggregateId)
  )
}

/** UTF-8 byte order, as `COLLATE "C"` sorts (JavaScript's `<` compares UTF-16 units, which differs above U+FFFF). */
function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'))
}

function laneOf(row: DiscardableRow): LaneKey {
  return {
    subscriptionId: row.subscriptionId,
    aggregateType: row.aggregateType,
    aggregateId: row.aggregateId,
  }
}

/** The blockers' lanes, each once, in lock order. */
function blockerLanes(rows: readonly DiscardableRow[]): LaneKey[] {
  const lanes = new Map<string, LaneKey>()
  for (const row of rows) {
    if (row.blocksLane)
      lanes.set(JSON.stringify([row.subscriptionId, row.aggregateType, row.aggregateId]), laneOf(row))
  }
  return [...lanes.values()].sort(compareLanes)
}

function refusal(rows: readonly DiscardableRow[]): OutboxError {
  const blockers = rows.filter((row) => row.blocksLane)
  const named = blockers
    .slice(0, NAMED_BLOCKERS)
    .map((row) => `${row.eventId} (lane ${describeLane(laneOf(row))})`)
  const more = blockers.length > NAMED_BLOCKERS ? ` and ${blockers.length - NAMED_BLOCKERS} more` : ''
  return new OutboxError(
    'ERR_OUTBOX_REFUSED',
    `refused to discard ${blockers.length} dead letter${blockers.length === 1 ? '' : 's'} that block${blockers.length === 1 ? 's its lane' : ' their lanes'}: ${named.join(', ')}${more}; deleting a blocker would leave its lane frozen. Nothing was discarded; pass unblockLanes: true (--unblock) to resume those lanes as if their dead letter had been skipped`,
  )
}

/**
 * Deletes dead letters for good — dead rows only, never a pending or sent one. A dead letter that BLOCKS its lane
 * (`onExhausted: 'block'`, see {@link DeadLetter.blocksLane}) is refused, the whole call with nothing deleted
 * (`ERR_OUTBOX_REFUSED` naming up to 5 of them), unless `unblockLanes: true`: then, in the same transaction and
 * before the delete, each such lane is locked as an enqueue and a claim lock it (counters, then lanes, in one fixed
 * order, so two actions never deadlock) and resumed as if its dead letter had been skipped: the rows it parked —
 * including one an enqueue held open meanwhile wrote — become due, in order. Other dead letters need no lane lock:
 * the delete re-checks each row is still dead, so a concurrent redrive wins cleanly.
 *
 * Records one `'dead-letters.discard'` row in the audit log in the same transaction. `dryRun: true` reports what
 * would be discarded and unblocked and changes nothing; it still throws the refusal when blockers are included
 * without `unblockLanes`.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { discardDeadLetters } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const preview = await discardDeadLetters(db, { filter: { eventType: 'user.*', status: 410 }, dryRun: true })
 * console.log(preview.discarded.length, preview.unblocked.length)
 * await discardDeadLetters(db, { filter: { eventType: 'user.*', status: 410 }, unblockLanes: true, actor: 'ops' })
 * ```
 */
export async function discardDeadLetters(db: Kysely<any>, options: DiscardOptions): Promise<DiscardResult> {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      'discardDeadLetters needs { eventIds } or { filter }',
      {
        option: 'eventIds',
      },
    )
  }
  const schema = resolveSchema(options.schema)
  const hasIds = options.eventIds !== undefined
  const hasFilter = options.filter !== undefined
  if (hasIds === hasFilter) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_OPTION',
      hasIds
        ? 'discardDeadLetters takes eventIds or filter, not both'
        : 'discardDeadLetters needs { eventIds: [...] } or { filter: {...} }: it never discards everything by default',
      { option: hasIds ? 'filter' : 'eventIds' },
    )
  }
  if (hasIds && !Array.isArray(options.eventIds)) {
    throw new OutboxError('ERR_OUTBOX_INVALID_OPTION', 'eventIds must be an array of event ids', {
      option: 'eventIds',
    })
  }
  const ids = hasIds ? eventIdsOption(options.eventIds as readonly unknown[]) : undefined
  const filter = hasFilter ? deadLetterFilterOption(options.filter) : undefined
  const subscriptionId = subscriptionIdOption(options.subscriptionId)
  const actor = actorOption(options.actor)
  const dryRun = options.dryRun === true
  const unblockLanes = options.unblockLanes === true
  const selection: DeadLetterSelection = { eventIds: ids ?? 'all', subscriptionId, filter }
  const notDeadOf = (discarded: readonly { eventId: string }[]) => {
    const gone = new Set(discarded.map((one) => one.eventId))
    return (ids ?? []).filter((id) => !gone.has(id))
  }

  if (dryRun) {
    const rows = await selectDiscardable({ db, schema }, selection)
    if (!unblockLanes && rows.some((row) => row.blocksLane)) throw refusal(rows)
    const discarded = rows.map((row) => ({ eventId: row.eventId, subscriptionId: row.subscriptionId }))
    const unblocked = rows
      .filter((row) => row.blocksLane)
      .map((row) => ({ ...laneOf(row), released: row.parked }))
      .sort(compareLanes)
    return { dryRun, discarded, unblocked, notDead: notDeadOf(discarded) }
  }

  return await inTransactionRetryingDeadlocks(db, async (trx) => {
    const ctx = { db: trx, schema }
    const seen = await selectDiscardable(ctx, selection)
    if (!unblockLanes && seen.some((row) => row.blocksLane)) throw refusal(seen)
    const lanes = blockerLanes(seen)
    const unblocked: UnblockedLane[] = []
    if (lanes.length > 0) {
      await lockCounters(ctx, lanes)
      const locked: LaneKey[] = []
      for (const lane of lanes) {
        if ((await lockLaneForAction(ctx, lane)).blockedReason === 'exhausted') locked.push(lane)
      }
      // Read again under the locks: a lane redriven (or blocked anew) between the first read and its lock is
      // released only if one of the rows being discarded is still its blocker.
      const ours = new Set(seen.map((row) => row.id))
      const current = blockerLanes(
        (await selectDiscardable(ctx, selection)).filter((row) => ours.has(row.id)),
      )
      for (const lane of current) {
        if (!locked.some((one) => compareLanes(one, lane) === 0)) continue
        unblocked.push({ ...lane, released: await releaseBlockedLane(ctx, lane) })
      }
    }
    const discarded = await deleteDeadRows(
      ctx,
      seen.map((row) => row.id),
    )
    const notDead = notDeadOf(discarded)
    await recordAudit(ctx, {
      actor,
      action: 'dead-letters.discard',
      target: {
        ...(ids ? { eventIds: ids } : { filter: filterForAudit(filter ?? {}) }),
        ...(subscriptionId === undefined ? {} : { subscriptionId }),
        unblockLanes,
      },
      result: {
        discarded: discarded.length,
        unblocked: unblocked.length,
        released: unblocked.reduce((sum, lane) => sum + lane.released, 0),
        notDead: notDead.length,
      },
    })
    return { dryRun, discarded, unblocked, notDead }
  })
}
