import { spliceEnvelope } from '@outbox/protocol'
import type { DeliveryOutcome, WebhookSender } from './delivery.js'
import { type DeliveryTarget, IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
import type { EventRef, RelayEventMap, RelayEvents } from './events.js'
import type { MarkBuffer } from './mark-buffer.js'
import {
  DEFAULT_DELIVERY_LOG,
  type DeliveryLog,
  type EndpointEvent,
  LEASE_MARGIN_MS,
  type ResolvedRelayOptions,
} from './options.js'
import { conflictParkDelay, decideAfterFailure } from './retry-policy.js'
import type { RelayRuntime } from './runtime.js'
import type { ClaimedLane, LaneEvent } from './sql/claimed-lane.js'
import { deadLetterHead } from './sql/dead-letter-head.js'
import type { AttemptRecord } from './sql/delivery-attempt-log.js'
import { type FailureHealth, settleProbe } from './sql/endpoint-health.js'
import type { FailedAttempt } from './sql/failed-attempt.js'
import { markStarted } from './sql/mark-started.js'
import { parkLane } from './sql/park-lane.js'
import { readTakeoverCharge } from './sql/read-takeover-charge.js'
import { scheduleRetry } from './sql/schedule-retry.js'
import { selectLaneEvents } from './sql/select-lane-events.js'
import { disableGoneSubscription } from './sql/subscription-store.js'
import type { SubscriptionTargets } from './subscription-targets.js'
import { readLaneTraceContexts, traceDelivery } from './tracing.js'
import type { WriteGate } from './write-gate.js'

/** What delivering one lane did. */
export interface LaneResult {
  readonly delivered: number
  readonly failed: number
  readonly dead: number
}

/** What a lane worker needs from its relay; built once per relay. */
export interface LaneContext {
  readonly options: ResolvedRelayOptions
  readonly runtime: RelayRuntime
  readonly sender: WebhookSender
  /** Where each subscription's lanes go, with its secrets, timeout and retry rules. */
  readonly targets: SubscriptionTargets
  readonly marks: MarkBuffer
  readonly events: RelayEvents
  /** True once the relay stops claiming: finish the current request, then hand the lane back. */
  readonly stopping: () => boolean
  readonly abort: AbortSignal
  /**
   * True when a lane of this subscription should hand itself back before its next request, so that its slot goes
   * to another subscription's lane waiting under its share (see the relay's slot sharing).
   */
  readonly yieldSlot: (subscriptionId: string) => boolean
  /** Payload bytes the relay may still read before its buffer budget is spent. */
  readonly bytesLeft: () => number
  /** Counts bytes a lane read past its claim against the budget. */
  readonly holdBytes: (bytes: number) => void
  /** Gives bytes counted by {@link LaneContext.holdBytes} back, once the lane that read them is done with them. */
  readonly freeBytes: (bytes: number) => void
  /**
   * Makes the relay start nothing else and waits until its other lanes have handed back and every mark and release
   * is written, so that `lane`'s next request goes alone. Resolves to the function that ends the isolation, or to
   * undefined when the relay is stopping or already isolating another lane (then hand `lane` back unstarted).
   */
  readonly isolate: (lane: ClaimedLane) => Promise<(() => void) | undefined>
  /** True while another lane than this one is being isolated: hand the lane back before its next request. */
  readonly heldBack: (lane: ClaimedLane) => boolean
  /** Where the outcome writes of failing subscriptions queue (see {@link WriteGate}). */
  readonly failureWrites: WriteGate
  /** Logs a failure the relay retries by itself and emits it as `relay:error`. */
  readonly reportError: (error: unknown, during: RelayEventMap['relay:error']['during']) => void
}

/** Why the head of a charged takeover failed: its request was under way when the previous claim expired. */
export const TAKEOVER_ERROR =
  'the previous claim expired while its request was under way (the relay crashed or hung on it)'

function toEvent(row: LaneEvent): EndpointEvent {
  return {
    eventId: row.eventId,
    type: row.eventType,
    aggregateType: row.aggregateType,
    aggregateId: row.aggregateId,
    sequence: row.sequence,
    occurredAt: row.createdAt.toISOString(),
  }
}

function refOf(target: DeliveryTarget, lane: ClaimedLane, row: LaneEvent): EventRef {
  return {
    subscriptionId: lane.subscriptionId,
    subscriptionName: target.name,
    eventId: row.eventId,
    eventType: row.eventType,
    aggregateType: row.aggregateType,
    aggregateId: row.aggregateId,
    sequence: row.sequence,
  }
}

/** What the relay's log lines about a lane name it by; built only when a line is logged (most rows log none). */
function laneLog(target: DeliveryTarget, lane: ClaimedLane): { subscription: string; lane: string } {
  return { subscription: target.name, lane: `${lane.aggregateType}:${lane.aggregateId}` }
}

/** One attempt for the delivery log (see the relay's `deliveryLog` option). */
function attemptOf(
  lane: ClaimedLane,
  row: LaneEvent,
  attempt: Pick<AttemptRecord, 'attemptedAt' | 'durationMs' | 'httpStatus' | 'answer' | 'error'>,
): AttemptRecord {
  return {
    subscriptionId: lane.subscriptionId,
    eventId: row.eventId,
    aggregateType: row.aggregateType,
    aggregateId: row.aggregateId,
    sequence: row.sequence,
    ...attempt,
  }
}

const NOTHING: LaneResult = Object.freeze({ delivered: 0, failed: 0, dead: 0 })

/** A subscription in good standing's outcome writes go at once. */
const UNGATED = { run: <T>(task: () => Promise<T>): Promise<T> => task() }

/**
 * Reports a lane claimed over an expired claim (`lane:takeover`) as soon as its claim returns, when no request of
 * its head was under way (a free takeover). A charged one is reported by {@link deliverLane} once it has read what
 * the charge is (an attempt, or provisional), see {@link emitTakeover}. A lane whose events were all delivered
 * meanwhile is not reported.
 */
export function reportTakeover(ctx: LaneContext, lane: ClaimedLane): void {
  const head = lane.events[0]
  if (!lane.takenOver || lane.charged || !head) return
  emitTakeover(ctx, lane, head, { attempts: head.attempts, provisional: false })
}

function emitTakeover(
  ctx: LaneContext,
  lane: ClaimedLane,
  head: LaneEvent,
  charge: { readonly attempts: number; readonly provisional: boolean },
): void {
  ctx.events.emit('lane:takeover', {
    subscriptionId: lane.subscriptionId,
    // A lane of a subscription no longer served is handed back unsent; its id still names it.
    subscriptionName: ctx.targets.get(lane.subscriptionId)?.name ?? lane.subscriptionId,
    aggregateType: lane.aggregateType,
    aggregateId: lane.aggregateId,
    eventId: head.eventId,
    charged: lane.charged,
    provisional: charge.provisional,
    attempts: charge.attempts,
  })
}

/**
 * Delivers one claimed lane in sequence order, one request at a time, and hands the lane back. Never rejects: when
 * the database fails under it mid-lane, that is reported (`relay:error`, during `outcome`) and the lane is left to
 * its lease, which expires so that another claim takes over.
 *
 * The lane stops at its first failure (nothing behind a failed head is sent); a request is never started unless
 * the lease still covers its whole timeout; 2xx marks go to the batch buffer and the release is queued behind
 * them, so the lane is free again only once its marks are written — but the caller's slot is free at once.
 *
 * Takeovers: a lane whose previous claim expired while a request of its head was under way (`charged`) first
 * settles that request. If the dead claim had sent it alone, it is a failed attempt like any other (retried on the
 * schedule or dead-lettered), so an event that kills every relay sending it cannot freeze its lane. Otherwise the
 * charge is provisional: it never dead-letters the head, but once such charges bring it to its attempts the head is
 * suspect and is sent alone from then on. A watched lane records its claim before the first request, which is what
 * lets the next takeover tell a started lane from one only claimed.
 */
export async function deliverLane(ctx: LaneContext, lane: ClaimedLane): Promise<LaneResult> {
  try {
    return await deliverClaimed(ctx, lane)
  } catch (error) {
    ctx.reportError(error, 'outcome')
    return NOTHING
  }
}

async function deliverClaimed(ctx: LaneContext, lane: ClaimedLane): Promise<LaneResult> {
  const head = lane.events[0]
  const target = ctx.targets.get(lane.subscriptionId)
  if (!head || !target) {
    // Its events were delivered by the previous owner between our claim and our read, or its subscription was
    // disabled or deleted since the claim: just hand it back.
    ctx.marks.release({ claimToken: lane.claimToken, delivered: false })
    return NOTHING
  }
  if (lane.charged) {
    const charge = await readTakeoverCharge(ctx.options, { claimToken: lane.claimToken, headId: head.id })
    // The claim is no longer ours: the next owner settles the charge.
    if (!charge) return NOTHING
    const attemptedAt = new Date()
    // Only a charge proven by a request started alone is an attempt; any other is provisional (see below).
    const attempts = head.attempts + (charge.startedAlone ? 1 : 0)
    emitTakeover(ctx, lane, head, { attempts, provisional: !charge.startedAlone })
    const failure: FailedAttempt = {
      claimToken: lane.claimToken,
      id: head.id,
      attempts,
      httpStatus: null,
      error: TAKEOVER_ERROR,
      attemptedAt,
      charged: true,
      ...(deliveryLogOf(ctx, target) === false
        ? {}
        : {
            log: attemptOf(lane, head, {
              attemptedAt,
              durationMs: null,
              httpStatus: null,
              answer: null,
              error: TAKEOVER_ERROR,
            }),
          }),
    }
    if (charge.startedAlone)
      return await settleFailure(ctx, target, lane, head, failure, lane.readAt, undefined)
    return await settleProvisionalCharge(ctx, target, lane, head, failure, charge.takeoverCharges + 1)
  }
  if (lane.watchStarts) {
    const started = await markStarted(ctx.options, {
      claimToken: lane.claimToken,
      headId: head.id,
      alone: false,
      leaseMs: ctx.options.leaseMs,
    })
    if (started === 'suspect') return await deliverAlone(ctx, target, lane, head)
    // The claim is no longer ours (its lease ran out before we started): nothing to send, nothing to release.
    if (started === 'lost') return NOTHING
  }
  const { result, settled } = await deliverInOrder(ctx, target, lane)
  // A failure's outcome (retry, park, dead letter) has released the lane already. Otherwise the release is not
  // awaited: the lane stays leased (no one, this relay included, can claim it) until the release is written in
  // the same statement as its marks, so the slot can take the next lane now instead of waiting for that write.
  if (!settled) ctx.marks.release({ claimToken: lane.claimToken, delivered: result.delivered > 0 })
  return result
}

/**
 * Sends a suspect head alone: the relay first lets its other lanes hand back and writes every mark, then records
 * the start as made alone (renewing the lease), sends the head, and writes its outcome — the 2xx mark and the
 * release, or the failure — before the relay starts anything else. So if the relay dies meanwhile, the head was the
 * only request it had started, and the next takeover's charge is a proven attempt; and an innocent head (a 2xx whose
 * mark a crash lost, a request beside a poison one) is simply delivered.
 *
 * What this costs the relay's other lanes: they start no request from the moment the isolation begins until the
 * head's outcome is written — the longest remaining request of the relay (at most its `requestTimeoutMs`), the
 * head's own request (at most its subscription's `requestTimeoutMs`) and three writes (marks, start, outcome).
 */
async function deliverAlone(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
  head: LaneEvent,
): Promise<LaneResult> {
  const log = {
    subscription: target.name,
    lane: `${lane.aggregateType}:${lane.aggregateId}`,
    eventId: head.eventId,
  }
  const end = await ctx.isolate(lane)
  if (!end) {
    // Stopping, or another lane is being sent alone: handed back unstarted, so the next claim is free.
    ctx.marks.release({ claimToken: lane.claimToken, delivered: false })
    return NOTHING
  }
  try {
    ctx.options.logger.warn(
      log,
      'suspect event (its takeover charges reached its attempts): sending it alone',
    )
    const claimedAt = ctx.runtime.clock.now()
    const started = await markStarted(ctx.options, {
      claimToken: lane.claimToken,
      headId: head.id,
      alone: true,
      leaseMs: ctx.options.leaseMs,
    })
    if (started !== 'started') return NOTHING
    // The start renewed the lease, counted from before it was sent; the slice starts again too.
    const alone: ClaimedLane = { ...lane, claimedAt, deadline: claimedAt + ctx.options.leaseMs }
    const step = await deliverRow(ctx, target, alone, head, lane.readAt, 0)
    if ('settled' in step) return step.settled
    const delivered = step.next === 'row'
    ctx.marks.release({ claimToken: lane.claimToken, delivered })
    await ctx.marks.flush()
    return { ...NOTHING, delivered: delivered ? 1 : 0 }
  } finally {
    end()
  }
}

/**
 * Settles a takeover charge that proves nothing: the expired claim's request was under way beside others, or was
 * answered and not yet marked, so nothing says this head killed the relay. The charge is recorded apart from the
 * attempts and never dead-letters the head; once `attempts` and these charges together reach `maxAttempts`, the head
 * is suspect and every further attempt of it is made alone ({@link deliverAlone}), where a crash proves it guilty.
 * Retried on the schedule as the charges count, or at once when the schedule is used up.
 */
async function settleProvisionalCharge(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
  head: LaneEvent,
  failure: FailedAttempt,
  charges: number,
): Promise<LaneResult> {
  const { options, events, runtime } = ctx
  const counted = head.attempts + charges
  const failingMs =
    head.failingMs === null ? 0 : head.failingMs + Math.max(0, runtime.clock.now() - lane.readAt)
  const decision = decideAfterFailure(
    target.retrySchedule,
    target.maxAttempts,
    { attempts: counted, failingMs },
    runtime.random,
  )
  const suspect = counted >= target.maxAttempts
  const delayMs = decision.kind === 'retry' ? decision.delayMs : 0
  await scheduleRetry(options, { failure, delayMs, provisional: { suspect } })
  const log = {
    subscription: target.name,
    lane: `${lane.aggregateType}:${lane.aggregateId}`,
    eventId: head.eventId,
    sequence: head.sequence,
  }
  options.logger.info(
    { ...log, attempts: failure.attempts, takeoverCharges: charges, suspect, retryInMs: delayMs },
    suspect
      ? 'takeover charged; the event is suspect: its next attempts are made alone'
      : 'takeover charged provisionally; will retry',
  )
  events.emit('delivery:retry', {
    ...refOf(target, lane, head),
    attempts: failure.attempts,
    httpStatus: null,
    error: failure.error,
    retryInMs: delayMs,
  })
  return { ...NOTHING, failed: 1 }
}

/** What delivering one row asks of its lane: go on, hand the lane back, or the lane was settled by a failure. */
type RowStep = { readonly next: 'row' } | { readonly next: 'hand back' } | { readonly settled: LaneResult }

/**
 * Sends the lane's rows batch after batch until one is not answered 2xx, the lease or the slice runs short, or
 * the relay stops. `settled` when a failure's outcome released the lane. The bytes of the batches it reads past
 * the claim count against the relay's budget until it returns (the claim's own bytes are the relay's to give back).
 */
async function deliverInOrder(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
): Promise<{ result: LaneResult; settled: boolean }> {
  let delivered = 0
  let batch: readonly LaneEvent[] = lane.events
  // Clock time the current batch's read returned: its rows' failing times were measured before it.
  let readAt = lane.readAt
  let readBytes = 0
  try {
    while (batch.length > 0) {
      for (const row of batch) {
        const step = await deliverRow(ctx, target, lane, row, readAt, delivered)
        if ('settled' in step) {
          return { result: { ...step.settled, delivered: delivered + step.settled.delivered }, settled: true }
        }
        if (step.next === 'hand back') return { result: { ...NOTHING, delivered }, settled: false }
        delivered += 1
      }
      batch = await nextBatch(ctx, lane, batch)
      await readLaneTraceContexts(ctx.options, batch)
      readAt = ctx.runtime.clock.now()
      const bytes = batch.reduce((sum, row) => sum + row.payloadBytes, 0)
      readBytes += bytes
      ctx.holdBytes(bytes)
    }
    return { result: { ...NOTHING, delivered }, settled: false }
  } finally {
    ctx.freeBytes(readBytes)
  }
}

/** Sends one row and records its outcome: a 2xx is marked, any other answer settles the lane. */
async function deliverRow(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
  row: LaneEvent,
  readAt: number,
  deliveredBefore: number,
): Promise<RowStep> {
  const { options, sender, events, runtime } = ctx
  // Another lane's outage failure is being recorded: its statement says whether the breaker is open now.
  const recording = lane.probe ? undefined : ctx.targets.recorded(lane.subscriptionId)
  if (recording) await recording
  if (ctx.stopping()) return { next: 'hand back' }
  if (ctx.heldBack(lane)) {
    options.logger.debug(laneLog(target, lane), 'another lane is being sent alone; handing the lane back')
    return { next: 'hand back' }
  }
  if (ctx.yieldSlot(lane.subscriptionId)) {
    options.logger.debug(laneLog(target, lane), 'slot wanted by another subscription; handing the lane back')
    return { next: 'hand back' }
  }
  if (runtime.clock.now() + target.requestTimeoutMs + LEASE_MARGIN_MS > lane.deadline) {
    options.logger.debug(laneLog(target, lane), 'lease too short for another request; handing the lane back')
    return { next: 'hand back' }
  }
  const probing = lane.probe && !probed.has(lane)
  // Claimed before the endpoint's breaker opened: no attempt is burned on an endpoint known to be down.
  if (!lane.probe && ctx.targets.breakerOpen(lane.subscriptionId)) return { next: 'hand back' }
  if (probing) {
    options.logger.info(
      { ...laneLog(target, lane), eventId: row.eventId },
      'endpoint breaker open: sending its probe',
    )
    events.emit('endpoint:probing', {
      subscriptionId: target.subscriptionId,
      name: target.name,
      eventId: row.eventId,
    })
  }
  const event = toEvent(row)
  const attemptedAt = new Date()
  const startedAt = performance.now()
  const answered = watchUnanswered(ctx, lane.subscriptionId, target.requestTimeoutMs)
  let outcome: DeliveryOutcome
  try {
    const url = target.url(event)
    const body = spliceEnvelope(event, row.payload)
    outcome = await traceDelivery(target, row, (headers) =>
      sender.send(url, event, body, ctx.abort, target, headers),
    )
  } catch (error) {
    outcome = { kind: 'failure', httpStatus: null, error: `endpoint function failed: ${String(error)}` }
  } finally {
    answered()
  }
  // What the slot rule knows of the endpoint: an outage failure (5xx, 408, timeout, network) makes its subscription
  // failing, any other answer puts it back in good standing.
  if (outcome.kind !== 'aborted') {
    ctx.targets.setFailing(
      lane.subscriptionId,
      outcome.kind === 'failure' && countsAsOutage(outcome.httpStatus),
    )
  }
  if (events.has('request:finished')) {
    events.emit('request:finished', {
      ...refOf(target, lane, row),
      durationMs: performance.now() - startedAt,
      outcome: outcome.kind,
      httpStatus: outcome.kind === 'aborted' ? null : outcome.httpStatus,
    })
  }
  const logged = logAttempt(deliveryLogOf(ctx, target), outcome)
    ? attemptOf(lane, row, {
        attemptedAt,
        durationMs: Math.round(performance.now() - startedAt),
        httpStatus: outcome.kind === 'aborted' ? null : outcome.httpStatus,
        answer: outcome.kind === 'aborted' ? null : (outcome.answer ?? null),
        error: outcome.kind === 'failure' && outcome.answer === undefined ? outcome.error : null,
      })
    : undefined
  if (probing && outcome.kind !== 'aborted') {
    probed.add(lane)
    // Any answer but a failure shows the endpoint up (a 409 is its consumer waiting for order, not an outage).
    await settleBreakerProbe(
      ctx,
      target,
      lane,
      !(outcome.kind === 'failure' && countsAsOutage(outcome.httpStatus)),
    )
  }

  if (outcome.kind === 'success') {
    ctx.marks.mark({
      id: row.id,
      claimToken: lane.claimToken,
      httpStatus: outcome.httpStatus,
      deliveryStatus: outcome.deliveryStatus,
      attemptedAt,
      ...(target.subscriptionId === IMPLICIT_SUBSCRIPTION_ID
        ? {}
        : { subscriptionId: target.subscriptionId }),
      ...(logged ? { attempt: logged } : {}),
    })
    if (events.has('delivery:success')) {
      events.emit('delivery:success', {
        ...refOf(target, lane, row),
        httpStatus: outcome.httpStatus,
        deliveryStatus: outcome.deliveryStatus,
        attempts: row.attempts + 1,
        latencyMs: Date.now() - row.createdAt.getTime(),
      })
    }
    if (outcome.deliveryStatus === 'stale_ignored') {
      options.logger.warn(
        { ...laneLog(target, lane), eventId: row.eventId, sequence: row.sequence },
        'consumer answered stale_ignored',
      )
      events.emit('delivery:stale', { ...refOf(target, lane, row), httpStatus: outcome.httpStatus })
    }
    return { next: 'row' }
  }

  if (outcome.kind === 'aborted') return { next: 'hand back' }

  // The lane stops here. Write its earlier 2xx marks first: the outcome below releases the lane, and marks
  // fenced by a released token would be dropped (and their events sent again).
  if (deliveredBefore > 0) await ctx.marks.flush()
  if (outcome.kind === 'conflict') {
    const parkMs = conflictParkDelay(target.retrySchedule, lane.conflictCount + 1, runtime.random)
    await parkLane(options, {
      claimToken: lane.claimToken,
      id: row.id,
      error: outcome.error,
      attemptedAt,
      delayMs: parkMs,
      ...(logged ? { log: logged } : {}),
    })
    options.logger.warn(
      { ...laneLog(target, lane), eventId: row.eventId, sequence: row.sequence },
      'consumer answered 409; lane parked',
    )
    events.emit('lane:blocked', {
      subscriptionId: lane.subscriptionId,
      subscriptionName: target.name,
      aggregateType: lane.aggregateType,
      aggregateId: lane.aggregateId,
      reason: 'conflict',
      eventId: row.eventId,
      retryInMs: parkMs,
    })
    return { settled: NOTHING }
  }
  const failure: FailedAttempt = {
    claimToken: lane.claimToken,
    id: row.id,
    attempts: row.attempts + 1,
    httpStatus: outcome.httpStatus,
    error: outcome.error,
    attemptedAt,
    ...(logged ? { log: logged } : {}),
  }
  const health = failureHealth(ctx, target, outcome.httpStatus, outcome.retryAfterMs)
  const recorded =
    health?.countsAsFailure && health.breaker !== false
      ? ctx.targets.recording(target.subscriptionId)
      : undefined
  try {
    if (outcome.httpStatus === 410) await retireGoneSubscription(ctx, target)
    return {
      // A failing subscription's outcome writes go through the relay's gate: a burst of them (requests that all
      // timed out together) never takes the pool from the healthy subscriptions' marks and claims.
      settled: await (ctx.targets.failing(lane.subscriptionId) ? ctx.failureWrites : UNGATED).run(() =>
        settleFailure(ctx, target, lane, row, failure, readAt, outcome.retryAfterMs, health),
      ),
    }
  } finally {
    recorded?.()
  }
}

/**
 * How long a request may go unanswered before its subscription counts as failing for the slot rule: a hanging
 * endpoint looks exactly like this long before its request times out, and until then it would take slots as if it
 * were healthy. A quarter of the request's timeout, at most one second — webhook endpoints answer in milliseconds;
 * one that takes seconds keeps its requests, and holds only the failing quota of the slots while it does.
 */
export function slowRequestMs(requestTimeoutMs: number): number {
  return Math.min(1000, requestTimeoutMs / 4)
}

/**
 * Arms the "unanswered for too long" mark of one request (only when the relay shares slots between subscriptions);
 * the returned function disarms it, or lifts the mark once the request ends.
 */
function watchUnanswered(ctx: LaneContext, subscriptionId: string, requestTimeoutMs: number): () => void {
  if (!ctx.targets.sharing) return () => {}
  const { clock } = ctx.runtime
  let lift: (() => void) | undefined
  const timer = clock.setTimeout(() => {
    lift = ctx.targets.unanswered(subscriptionId)
  }, slowRequestMs(requestTimeoutMs))
  return () => {
    clock.clearTimeout(timer)
    lift?.()
  }
}

/** What the delivery log keeps of a subscription's attempts: the relay's option, else the subscription's default. */
function deliveryLogOf(ctx: LaneContext, target: DeliveryTarget): DeliveryLog {
  const { deliveryLog } = ctx.options
  if (deliveryLog !== undefined) return deliveryLog
  return target.subscriptionId === IMPLICIT_SUBSCRIPTION_ID
    ? DEFAULT_DELIVERY_LOG.endpoint
    : DEFAULT_DELIVERY_LOG.subscriptions
}

/** Whether the delivery log records this outcome: an aborted request is no attempt; a 2xx only under `'all'`. */
function logAttempt(deliveryLog: DeliveryLog, outcome: DeliveryOutcome): boolean {
  if (deliveryLog === false || outcome.kind === 'aborted') return false
  return deliveryLog === 'all' || outcome.kind !== 'success'
}

/** Probe lanes whose probe was settled: the rest of their rows go as usual. */
const probed = new WeakSet<ClaimedLane>()

/** A failed answer that says the endpoint is down (5xx, 408, timeout, network): what the breaker counts. */
function countsAsOutage(httpStatus: number | null): boolean {
  return httpStatus === null || httpStatus >= 500 || httpStatus === 408
}

/** What a stored subscription's failure tells its endpoint's health; nothing for the implicit subscription. */
function failureHealth(
  ctx: LaneContext,
  target: DeliveryTarget,
  httpStatus: number | null,
  retryAfterMs: number | undefined,
): FailureHealth | undefined {
  if (target.subscriptionId === IMPLICIT_SUBSCRIPTION_ID) return undefined
  return {
    countsAsFailure: countsAsOutage(httpStatus),
    throttleMs: retryAfterMs,
    breaker: ctx.options.endpointBreaker,
  }
}

/** Records the probe's answer: the breaker closes, or opens again for a longer cool-down. */
async function settleBreakerProbe(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
  succeeded: boolean,
): Promise<void> {
  const breaker = ctx.options.endpointBreaker
  if (breaker === false) return
  let settled: Awaited<ReturnType<typeof settleProbe>>
  try {
    settled = await settleProbe(ctx.options, {
      subscriptionId: lane.subscriptionId,
      claimToken: lane.claimToken,
      succeeded,
      breaker,
    })
  } catch (error) {
    // The probe's token stays; the next probe goes when its lease ends.
    ctx.events.emit('relay:error', { error, during: 'outcome' })
    return
  }
  if (settled === undefined) return
  const log = { subscriptionId: target.subscriptionId, subscription: target.name }
  if (settled.state === 'closed') {
    ctx.targets.setBreakerOpen(target.subscriptionId, false)
    ctx.options.logger.info(log, 'endpoint breaker closed: the probe was answered')
    ctx.events.emit('endpoint:closed', { subscriptionId: target.subscriptionId, name: target.name })
  } else {
    reportBreakerOpened(ctx, target, 'probe failed', null, settled.cooldownMs)
  }
}

/** A breaker this relay opened (by a failure streak or a failed probe): a log line and an event. */
function reportBreakerOpened(
  ctx: LaneContext,
  target: DeliveryTarget,
  reason: 'failures' | 'probe failed',
  failureStreak: number | null,
  cooldownMs: number,
): void {
  ctx.targets.setBreakerOpen(target.subscriptionId, true)
  ctx.options.logger.warn(
    { subscriptionId: target.subscriptionId, subscription: target.name, reason, failureStreak, cooldownMs },
    `endpoint breaker opened: no request to it until a probe in ${cooldownMs} ms`,
  )
  ctx.events.emit('endpoint:opened', {
    subscriptionId: target.subscriptionId,
    name: target.name,
    reason,
    failureStreak,
    cooldownMs,
  })
}

/**
 * `410 Gone` from a stored subscription's endpoint: the customer removed it, so the subscription is disabled with
 * reason `gone` (its events are kept, and delivered if it is enabled again) instead of burning every lane's attempts.
 * The attempt itself is an ordinary failure. The implicit subscription is the operator's: its 410 is only a failure.
 */
async function retireGoneSubscription(ctx: LaneContext, target: DeliveryTarget): Promise<void> {
  if (target.subscriptionId === IMPLICIT_SUBSCRIPTION_ID) return
  ctx.targets.forget(target.subscriptionId)
  try {
    if (!(await disableGoneSubscription(ctx.options, { id: target.subscriptionId }))) return
  } catch (error) {
    // The lane's own outcome is what matters now; the next 410 tries again.
    ctx.events.emit('relay:error', { error, during: 'outcome' })
    return
  }
  ctx.options.logger.warn(
    { subscriptionId: target.subscriptionId, subscription: target.name },
    'endpoint answered 410 Gone: subscription disabled (enable it to resume)',
  )
  ctx.events.emit('subscription:disabled', {
    subscriptionId: target.subscriptionId,
    name: target.name,
    reason: 'gone',
    httpStatus: 410,
  })
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
  batch: readonly LaneEvent[],
): Promise<readonly LaneEvent[]> {
  const { options, runtime } = ctx
  if (batch.length < options.batchSize || ctx.stopping()) return []
  if (runtime.clock.now() - lane.claimedAt > LANE_SLICE_MS) return []
  const bytesLeft = ctx.bytesLeft()
  if (bytesLeft <= 0) return []
  const last = batch[batch.length - 1]!
  try {
    // Fenced by the token, and after the last row sent: its marks may still be in the buffer, not yet written.
    return await selectLaneEvents(options, {
      claimToken: lane.claimToken,
      afterSequence: last.sequence,
      batchSize: options.batchSize,
      maxBytes: bytesLeft,
    })
  } catch (error) {
    options.logger.warn(
      { err: error, lane: `${lane.aggregateType}:${lane.aggregateId}` },
      'reading the next batch failed; handing the lane back',
    )
    return []
  }
}

/**
 * Settles a failed attempt on a lane's head: retried after the delay {@link decideAfterFailure} gives, or
 * dead-lettered once the event has used its attempts and its failing horizon. Releases the lane.
 *
 * `readAt` is the clock time the read that brought the row returned: its `failingMs` was measured before that, in
 * database time, so the time since is added (an underestimate by the read's own duration, never an overestimate:
 * giving up is never early).
 */
async function settleFailure(
  ctx: LaneContext,
  target: DeliveryTarget,
  lane: ClaimedLane,
  row: LaneEvent,
  failure: FailedAttempt,
  readAt: number,
  retryAfterMs: number | undefined,
  health?: FailureHealth,
): Promise<LaneResult> {
  const { options, events, runtime } = ctx
  const log = {
    subscription: target.name,
    lane: `${lane.aggregateType}:${lane.aggregateId}`,
    eventId: row.eventId,
    sequence: row.sequence,
  }
  const failingMs = row.failingMs === null ? 0 : row.failingMs + Math.max(0, runtime.clock.now() - readAt)
  const decision = decideAfterFailure(
    target.retrySchedule,
    target.maxAttempts,
    retryAfterMs === undefined
      ? { attempts: failure.attempts, failingMs }
      : { attempts: failure.attempts, failingMs, retryAfterMs },
    runtime.random,
  )
  if (decision.kind === 'dead') {
    const { onExhausted } = target
    const { opened, open } = await deadLetterHead(
      options,
      health ? { failure, onExhausted, health } : { failure, onExhausted },
    )
    if (opened) reportBreakerOpened(ctx, target, 'failures', opened.failureStreak, opened.cooldownMs)
    else if (open) ctx.targets.setBreakerOpen(target.subscriptionId, true)
    options.logger.error(
      { ...log, attempts: failure.attempts, status: failure.httpStatus, error: failure.error },
      'event dead-lettered',
    )
    events.emit('delivery:dead', {
      ...refOf(target, lane, row),
      attempts: failure.attempts,
      httpStatus: failure.httpStatus,
      error: failure.error,
      onExhausted,
    })
    if (onExhausted === 'block') {
      events.emit('lane:blocked', {
        subscriptionId: lane.subscriptionId,
        subscriptionName: target.name,
        aggregateType: lane.aggregateType,
        aggregateId: lane.aggregateId,
        reason: 'exhausted',
        eventId: row.eventId,
        retryInMs: null,
      })
    }
    return { ...NOTHING, dead: 1 }
  }
  const { opened, open } = await scheduleRetry(
    options,
    health ? { failure, delayMs: decision.delayMs, health } : { failure, delayMs: decision.delayMs },
  )
  // Opened by another relay: this one's lanes of it hand themselves back now, not after its next refresh.
  if (opened) reportBreakerOpened(ctx, target, 'failures', opened.failureStreak, opened.cooldownMs)
  else if (open) ctx.targets.setBreakerOpen(target.subscriptionId, true)
  options.logger.info(
    {
      ...log,
      attempts: failure.attempts,
      status: failure.httpStatus,
      error: failure.error,
      retryInMs: decision.delayMs,
    },
    'delivery failed; will retry',
  )
  events.emit('delivery:retry', {
    ...refOf(target, lane, row),
    attempts: failure.attempts,
    httpStatus: failure.httpStatus,
    error: failure.error,
    retryInMs: decision.delayMs,
  })
  return { ...NOTHING, failed: 1 }
}
