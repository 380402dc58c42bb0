import type { OutboxEvent } from '@outbox/protocol'
import { buildBody, type DeliveryOutcome, type WebhookSender } from './delivery.js'
import type { EventRef, RelayEvents } from './events.js'
import type { MarkBuffer } from './mark-buffer.js'
import { LEASE_MARGIN_MS, type ResolvedRelayOptions } from './options.js'
import { conflictParkDelay, retryDelay } from './retry-policy.js'
import { deadLetterHead } from './sql/dead-letter-head.js'
import type { FailedAttempt } from './sql/failed-attempt.js'
import { parkLane } from './sql/park-lane.js'
import { scheduleRetry } from './sql/schedule-retry.js'
import { type LaneEventRow, selectLaneEvents } from './sql/select-lane-events.js'

/** A lane this relay owns, with the events read for it. */
export interface ClaimedLane {
  readonly aggregateType: string
  readonly aggregateId: string
  readonly claimToken: string
  /** Monotonic time (performance.now) after which the lease may be gone; taken BEFORE the claim was sent. */
  readonly deadline: number
  /** Consecutive 409 parks before this claim. */
  readonly conflictCount: number
  readonly events: LaneEventRow[]
}

/** What delivering one lane did. */
export interface LaneResult {
  delivered: number
  failed: number
  dead: number
}

/** What a lane worker needs from its relay. */
export interface LaneContext {
  readonly options: ResolvedRelayOptions
  readonly sender: WebhookSender
  readonly marks: MarkBuffer
  readonly events: RelayEvents
  /** True once the relay stops claiming: finish the current request, then hand the lane back. */
  readonly stopping: () => boolean
  readonly abort: AbortSignal
}

function toEvent(row: LaneEventRow): OutboxEvent<unknown> {
  return {
    eventId: row.event_id,
    type: row.event_type,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    occurredAt: row.created_at.toISOString(),
    data: undefined,
  }
}

function refOf(event: OutboxEvent<unknown>): EventRef {
  return {
    eventId: event.eventId,
    eventType: event.type,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    sequence: event.sequence,
  }
}

/**
 * Delivers one claimed lane in sequence order, one request at a time, and hands the lane back.
 *
 * The lane stops at its first failure (nothing behind a failed head is sent); a request is never started unless
 * the lease still covers its whole timeout; 2xx marks go to the batch buffer and the release is queued behind
 * them, so the lane is free again only once its marks are written — but the caller's slot is free at once.
 */
export async function deliverLane(ctx: LaneContext, lane: ClaimedLane): Promise<LaneResult> {
  const result: LaneResult = { delivered: 0, failed: 0, dead: 0 }
  const settled = await deliverInOrder(ctx, lane, result)
  // A failure's outcome (retry, park, dead letter) has released the lane already. Otherwise the release is not
  // awaited: the lane stays leased (no one, this relay included, can claim it) until the release is written in
  // the same statement as its marks, so the slot can take the next lane now instead of waiting for that write.
  if (!settled) ctx.marks.release({ claimToken: lane.claimToken, delivered: result.delivered > 0 })
  return result
}

/** What delivering one row asks of its lane. */
type RowStep = 'next' | 'hand back' | 'settled'

/**
 * Sends the lane's rows batch after batch until one is not answered 2xx, the lease or the slice runs short, or
 * the relay stops. True when a failure's outcome released the lane.
 */
async function deliverInOrder(ctx: LaneContext, lane: ClaimedLane, result: LaneResult): Promise<boolean> {
  const claimedAt = performance.now()
  const log = { lane: `${lane.aggregateType}:${lane.aggregateId}` }
  for (let batch = lane.events; batch.length > 0; batch = await nextBatch(ctx, lane, batch, claimedAt)) {
    for (const row of batch) {
      const step = await deliverRow(ctx, lane, row, result, log)
      if (step !== 'next') return step === 'settled'
    }
  }
  return false
}

/** Sends one row and records its outcome: a 2xx is marked, any other answer settles the lane. */
async function deliverRow(
  ctx: LaneContext,
  lane: ClaimedLane,
  row: LaneEventRow,
  result: LaneResult,
  log: { readonly lane: string },
): Promise<RowStep> {
  const { options, sender, events } = ctx
  if (ctx.stopping()) return 'hand back'
  if (performance.now() + options.requestTimeoutMs + LEASE_MARGIN_MS > lane.deadline) {
    options.logger.debug(log, 'lease too short for another request; handing the lane back')
    return 'hand back'
  }
  const event = toEvent(row)
  const attemptedAt = new Date()
  let outcome: DeliveryOutcome
  try {
    const url = options.endpoint(event)
    outcome = await sender.send(url, event, buildBody(event, row.payload), ctx.abort)
  } catch (error) {
    outcome = { kind: 'failure', httpStatus: null, error: `endpoint function failed: ${String(error)}` }
  }

  if (outcome.kind === 'success') {
    ctx.marks.mark({
      id: row.id,
      claimToken: lane.claimToken,
      httpStatus: outcome.httpStatus,
      deliveryStatus: outcome.deliveryStatus,
      attemptedAt,
    })
    result.delivered += 1
    if (events.has('delivery:success')) {
      events.emit('delivery:success', {
        ...refOf(event),
        httpStatus: outcome.httpStatus,
        deliveryStatus: outcome.deliveryStatus,
        attempts: row.attempts + 1,
        latencyMs: Date.now() - row.created_at.getTime(),
      })
    }
    if (outcome.deliveryStatus === 'stale_ignored') {
      options.logger.warn(
        { ...log, eventId: event.eventId, sequence: event.sequence },
        'consumer answered stale_ignored',
      )
      events.emit('delivery:stale', { ...refOf(event), httpStatus: outcome.httpStatus })
    }
    return 'next'
  }

  if (outcome.kind === 'aborted') return 'hand back'

  // The lane stops here. Write its earlier 2xx marks first: the outcome below releases the lane, and marks
  // fenced by a released token would be dropped (and their events sent again).
  if (result.delivered > 0) await ctx.marks.flush()
  if (outcome.kind === 'conflict') {
    const parkMs = conflictParkDelay(options.retrySchedule, lane.conflictCount + 1)
    await parkLane(
      options.db,
      options.schema,
      { claimToken: lane.claimToken, id: row.id, error: outcome.error, attemptedAt },
      parkMs,
    )
    options.logger.warn(
      { ...log, eventId: event.eventId, sequence: event.sequence },
      'consumer answered 409; lane parked',
    )
    events.emit('lane:blocked', {
      aggregateType: lane.aggregateType,
      aggregateId: lane.aggregateId,
      reason: 'conflict',
      eventId: event.eventId,
      retryInMs: parkMs,
    })
    return 'settled'
  }
  const failure: FailedAttempt = {
    claimToken: lane.claimToken,
    id: row.id,
    attempts: row.attempts + 1,
    httpStatus: outcome.httpStatus,
    error: outcome.error,
    attemptedAt,
  }
  await settleFailure(ctx, lane, event, failure, outcome.retryAfterMs, result)
  return 'settled'
}

/**
 * How long a lane may keep its slot reading batch after batch: a hot aggregate then costs no release and claim
 * per `batchSize` events, while other lanes still get the slot within about this long.
 */
const LANE_SLICE_MS = 1000

/** The rows after a fully delivered batch, when the lane may go on with them; none when it should be handed back. */
async function nextBatch(
  ctx: LaneContext,
  lane: ClaimedLane,
  batch: readonly LaneEventRow[],
  claimedAt: number,
): Promise<LaneEventRow[]> {
  const { options } = ctx
  if (batch.length < options.batchSize || ctx.stopping()) return []
  if (performance.now() - claimedAt > LANE_SLICE_MS) return []
  const last = batch[batch.length - 1]!
  try {
    // Fenced by the token, and after the last row sent: its marks may still be in the buffer, not yet written.
    return await selectLaneEvents(
      options.db,
      options.schema,
      [lane.claimToken],
      options.batchSize,
      last.sequence,
    )
  } catch (error) {
    options.logger.warn(
      { err: error, lane: `${lane.aggregateType}:${lane.aggregateId}` },
      'reading the next batch failed; handing the lane back',
    )
    return []
  }
}

/** Retries a failed head on the schedule, or dead-letters it when its attempts are used up. Releases the lane. */
export async function settleFailure(
  ctx: LaneContext,
  lane: Pick<ClaimedLane, 'aggregateType' | 'aggregateId'>,
  event: OutboxEvent<unknown>,
  failure: FailedAttempt,
  retryAfterMs: number | undefined,
  result: LaneResult,
): Promise<void> {
  const { options, events } = ctx
  const log = {
    lane: `${lane.aggregateType}:${lane.aggregateId}`,
    eventId: event.eventId,
    sequence: event.sequence,
  }
  const scheduled = retryDelay(options.retrySchedule, failure.attempts)
  if (scheduled === null || failure.attempts >= options.maxAttempts) {
    await deadLetterHead(options.db, options.schema, failure, options.onExhausted)
    result.dead += 1
    options.logger.error(
      { ...log, attempts: failure.attempts, status: failure.httpStatus, error: failure.error },
      'event dead-lettered',
    )
    events.emit('delivery:dead', {
      ...refOf(event),
      attempts: failure.attempts,
      httpStatus: failure.httpStatus,
      error: failure.error,
      onExhausted: options.onExhausted,
    })
    if (options.onExhausted === 'block') {
      events.emit('lane:blocked', { ...lane, reason: 'exhausted', eventId: event.eventId, retryInMs: null })
    }
    return
  }
  const delayMs = retryAfterMs ?? scheduled
  await scheduleRetry(options.db, options.schema, failure, delayMs)
  result.failed += 1
  options.logger.info(
    {
      ...log,
      attempts: failure.attempts,
      status: failure.httpStatus,
      error: failure.error,
      retryInMs: delayMs,
    },
    'delivery failed; will retry',
  )
  events.emit('delivery:retry', {
    ...refOf(event),
    attempts: failure.attempts,
    httpStatus: failure.httpStatus,
    error: failure.error,
    retryInMs: delayMs,
  })
}
