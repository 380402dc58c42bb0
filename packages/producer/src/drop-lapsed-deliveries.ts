import { setTimeout as delay } from 'node:timers/promises'
import type { Kysely } from 'kysely'
import { recordAudit } from './audit.js'
import type { Logger } from './logger.js'
import { inTransactionRetryingDeadlocks } from './retry-deadlocks.js'
import { dropLanePrefixes } from './sql/drop-lane-prefixes.js'
import { lockLanesForDrop } from './sql/lock-lanes-for-drop.js'
import { lockLapsedSubscription } from './sql/lock-lapsed-subscription.js'
import { type LaneCursor, selectDroppableLanes } from './sql/select-droppable-lanes.js'
import { selectLapsedSubscriptions } from './sql/select-lapsed-subscriptions.js'

/** What one drop pass is asked to do (prune's options, resolved). */
export interface DropLapsedRequest {
  readonly db: Kysely<any>
  readonly schema: string
  /** The disabled retention in ms. */
  readonly retentionMs: number
  /** Most rows per batch (one transaction), and most lanes read per batch. */
  readonly batchSize: number
  /** Batch budget of the pass. */
  readonly maxBatches: number
  readonly pauseMs: number
  readonly signal?: AbortSignal
  /** Called after every batch with the rows it dropped. */
  readonly onBatch: (dropped: number) => void
  readonly logger: Logger
  /** Who asked for the drop, as the audit log records it. */
  readonly actor: string
}

/** What the pass did: rows dropped, and whether nothing past the retention is left that it could take. */
export interface DropLapsedResult {
  readonly dropped: number
  readonly caughtUp: boolean
}

type BatchOutcome =
  | { readonly kind: 'enabled' | 'done' }
  | {
      readonly kind: 'batch'
      readonly dropped: number
      readonly skipped: number
      readonly next: LaneCursor | null
    }

const laneKey = (lane: { aggregate_type: string; aggregate_id: string }) =>
  JSON.stringify([lane.aggregate_type, lane.aggregate_id])

/**
 * Drops the pending deliveries that disabled stored subscriptions have held longer than the disabled retention:
 * subscription by subscription, lanes in key order, each batch one transaction that locks the subscription (an
 * enable in flight wins), then the lanes (as operator actions take them, skipping any an enqueue, a claim, a redrive
 * or a live lease holds), then cuts a prefix of each lane, counts what went on the subscription and records it in the
 * audit log (one row per batch that dropped anything, in its transaction: the row exists exactly when the drop
 * committed). A lane it had to skip makes the pass not caught up: a later run takes it.
 */
export async function dropLapsedDeliveries(request: DropLapsedRequest): Promise<DropLapsedResult> {
  const { db, schema, retentionMs, batchSize, maxBatches, pauseMs, signal, logger, actor } = request
  const lapsed = await selectLapsedSubscriptions({ db, schema }, { retentionMs })
  let dropped = 0
  let batches = 0
  let caughtUp = true
  for (const subscription of lapsed) {
    let after: LaneCursor | null = null
    let droppedHere = 0
    let skippedHere = 0
    for (;;) {
      if (signal?.aborted || batches >= maxBatches) {
        caughtUp = false
        break
      }
      const outcome = await inTransactionRetryingDeadlocks(db, async (trx): Promise<BatchOutcome> => {
        const ctx = { db: trx, schema }
        if (!(await lockLapsedSubscription(ctx, { id: subscription.id, retentionMs }))) {
          return { kind: 'enabled' }
        }
        const lanes = await selectDroppableLanes(ctx, {
          subscriptionId: subscription.id,
          retentionMs,
          after,
          limit: batchSize,
        })
        if (lanes.length === 0) return { kind: 'done' }
        const locked = new Set(
          (
            await lockLanesForDrop(ctx, {
              subscriptionId: subscription.id,
              lanes: lanes.map((lane) => ({
                aggregateType: lane.aggregate_type,
                aggregateId: lane.aggregate_id,
              })),
            })
          ).map(laneKey),
        )
        const cut = await dropLanePrefixes(ctx, {
          subscriptionId: subscription.id,
          lanes: lanes
            .filter((lane) => locked.has(laneKey(lane)))
            .map((lane) => ({
              aggregateType: lane.aggregate_type,
              aggregateId: lane.aggregate_id,
              upto: lane.upto,
            })),
          limit: batchSize,
        })
        const total = cut.reduce((sum, lane) => sum + Number(lane.dropped), 0)
        if (total > 0) {
          // Events a customer never received: who asked, which subscription, how many. Ids and counts only, never
          // the URL (it may carry a credential).
          await recordAudit(ctx, {
            actor,
            action: 'subscription.drop-pending',
            target: {
              subscriptionId: subscription.id,
              ...(subscription.name === null ? {} : { subscriptionName: subscription.name }),
              disabledRetentionMs: retentionMs,
            },
            result: { dropped: total, lanes: cut.length, skippedLanes: lanes.length - locked.size },
          })
        }
        const last = cut.at(-1)
        // A full batch may have cut its last lane short: the next batch starts AT that lane. Otherwise every lane
        // it locked lost its whole prefix, and the next batch starts after the last lane read (none if fewer than
        // asked for came back: the subscription is done).
        const next: LaneCursor | null =
          total >= batchSize && last !== undefined
            ? { aggregateType: last.aggregate_type, aggregateId: last.aggregate_id, inclusive: true }
            : lanes.length < batchSize
              ? null
              : {
                  aggregateType: lanes.at(-1)!.aggregate_type,
                  aggregateId: lanes.at(-1)!.aggregate_id,
                  inclusive: false,
                }
        return { kind: 'batch', dropped: total, skipped: lanes.length - locked.size, next }
      })
      if (outcome.kind !== 'batch') break
      batches += 1
      dropped += outcome.dropped
      droppedHere += outcome.dropped
      skippedHere += outcome.skipped
      request.onBatch(outcome.dropped)
      if (outcome.next === null) break
      after = outcome.next
      if (pauseMs > 0) await delay(pauseMs, undefined, { signal }).catch(() => {})
    }
    if (skippedHere > 0) caughtUp = false
    if (droppedHere > 0 || skippedHere > 0) {
      const name = subscription.name ?? subscription.id
      logger.warn(
        {
          subscriptionId: subscription.id,
          subscriptionName: subscription.name ?? undefined,
          dropped: droppedHere,
          skippedLanes: skippedHere,
          disabledRetentionMs: retentionMs,
        },
        `dropped ${droppedHere} pending deliver${droppedHere === 1 ? 'y' : 'ies'} of disabled subscription ${name}, held longer than the disabled retention` +
          (skippedHere > 0
            ? `; ${skippedHere} busy lane${skippedHere === 1 ? '' : 's'} left for a later run`
            : ''),
      )
    }
    if (!caughtUp && (signal?.aborted || batches >= maxBatches)) break
  }
  return { dropped, caughtUp }
}
