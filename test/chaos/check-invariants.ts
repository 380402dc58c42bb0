import { checkIntegrity, stats } from '@outbox/producer'
import { type Kysely, sql } from 'kysely'
import type { EventRequests } from './fault-proxy.js'

/**
 * The four runs: no poison; poison under `onExhausted: 'skip'`; poison under `'block'`; and `retry-after`, a finite
 * schedule against an endpoint that answers much of the time 429/503 with a short `Retry-After`.
 */
export type ChaosMode = 'normal' | 'poison-skip' | 'poison-block' | 'retry-after'

/** One broken invariant, with a few examples to start the investigation from. */
export interface Violation {
  readonly invariant: string
  readonly detail: string
  readonly examples: readonly string[]
}

/** What the databases say after the drain. */
export interface DatabaseFigures {
  /** Events in the producer's outbox: exactly the committed ones. */
  eventsCommitted: number
  /** Distinct committed transactions (from the event tags). */
  transactionsCommitted: number
  aggregates: number
  poisonCommitted: number
  sent: number
  pending: number
  dead: number
  blockedLanes: number
  /** Events held behind a blocked head (`'block'` only). */
  stalled: number
  /** Sum of `attempts` over the outbox: every request the relays made, plus one per takeover. */
  attempts: number
  applied: number
  processedEvents: number
  /** Dead letters whose late copy the subscriber recorded as stale_ignored. */
  deadRecordedStale: number
  /** Dead letters the subscriber applied all the same, its answer lost on the way (retry-after only). */
  deadApplied: number
  /** Things `checkIntegrity` found worth a look that break no rule (heads overdue with no relay on them). */
  integrityFindings: number
}

/** What the proxy's own account of every request says about attempts and giving up. */
export interface LedgerFigures {
  /** The relays' `maxAttempts`. */
  maxAttempts: number
  /** The relays' give-up horizon (`retryHorizonMs` of their schedule). */
  horizonMs: number
  /**
   * Sent events whose requests failed at least `maxAttempts` times before one got through: held back by the
   * horizon, they would have been dead-lettered under a rule that counted attempts alone.
   */
  sentPastMaxAttempts: number
  /** Most failed requests one event had before it was sent. */
  mostFailuresBeforeSent: number
  /** Fewest requests (other than 409s) among the dead letters; null without dead letters. */
  deadFewestRequests: number | null
  /** Shortest time from a dead letter's first failed request to its death; null without dead letters. */
  deadShortestSpanMs: number | null
  /**
   * The same span by the outbox's own clock (`dead_at − first_failed_at`), for comparison only: below the horizon,
   * the relay gave up early by its own account.
   */
  deadShortestRecordedSpanMs: number | null
}

/** What the run recorded itself, to hold the relays to: never the outbox's own attempt columns. */
export interface RunRecord {
  /** Event ids the relays sent, as the proxy saw them: none may be unknown to the producer database. */
  readonly sentEventIds: ReadonlySet<string>
  /** The proxy's account of every request, by event id. */
  readonly requestsByEvent: ReadonlyMap<string, EventRequests>
  /** The relays' `maxAttempts` (their schedule's length + 1). */
  readonly maxAttempts: number
  /** The relays' give-up horizon, `retryHorizonMs(schedule)`. */
  readonly horizonMs: number
  /** The relays' lease: `checkIntegrity` reports a longer one. */
  readonly leaseMs: number
}

/** The outcome of {@link checkInvariants}. */
export interface InvariantReport {
  readonly violations: Violation[]
  readonly figures: DatabaseFigures
  readonly ledger: LedgerFigures
}

interface OutboxRow {
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: number
  status: 'pending' | 'sent' | 'dead'
  attempts: number
  tag: string | null
  intent: string | null
  poison: boolean
  available_at_infinite: boolean
  /** Epoch milliseconds of its dead-lettering, in the database's clock; null unless dead. */
  dead_at_ms: number | null
  /** `dead_at − first_failed_at` in milliseconds: the failing span by the outbox's own account; null unless dead. */
  recorded_span_ms: number | null
}

interface AppliedRow {
  id: string
  event_id: string
  aggregate_type: string
  aggregate_id: string
  sequence: number
  tag: string
}

const key = (row: { aggregate_type: string; aggregate_id: string }) =>
  `${row.aggregate_type}:${row.aggregate_id}`
const MAX_EXAMPLES = 5

function groupBy<T>(rows: readonly T[], by: (row: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>()
  for (const row of rows) {
    const list = groups.get(by(row))
    if (list) list.push(row)
    else groups.set(by(row), [row])
  }
  return groups
}

/**
 * Checks the guarantee from the two databases alone. The expected set is the producer's outbox after the run —
 * never what workers believe they committed: a commit in flight during a restart may or may not have happened.
 *
 * - Producer: events and business rows commit together (tags match, order versions add up); no rolled-back
 *   event exists; each aggregate's sequences are 1…n without gaps.
 * - Relay: nothing pending, nothing dead (poison modes: exactly the poison events are dead — under `'block'` the
 *   first poison of each poisoned aggregate, with its lane blocked and the rest of the lane still pending;
 *   `retry-after`: any event may die, but see the next point); every dead letter used its own attempts — the
 *   proxy saw at least `maxAttempts` failed requests for it (or requests open when their relay was killed), the
 *   first of them at least the horizon before its death; `checkIntegrity` finds every lane live.
 * - Subscriber: every event that should be applied is applied exactly once (append-only log and counter), none
 *   other is (rolled back, unknown, poison, behind a blocked head); each aggregate's applied sequences are
 *   strictly increasing and gap-free in log order (except the dead-lettered ones under `'skip'`); dedupe records
 *   and cursors agree. Under `retry-after` a dead letter may have been applied once, in order, when its last
 *   answer was lost after the subscriber applied it.
 */
export async function checkInvariants(
  producer: Kysely<any>,
  subscriber: Kysely<any>,
  mode: ChaosMode,
  run: RunRecord,
): Promise<InvariantReport> {
  const violations: Violation[] = []
  const fail = (invariant: string, detail: string, examples: readonly string[] = []) =>
    violations.push({ invariant, detail, examples: examples.slice(0, MAX_EXAMPLES) })

  const { rows: outbox } = await sql<OutboxRow>`
    SELECT event_id, aggregate_type, aggregate_id, sequence::int AS sequence, status, attempts,
           payload->>'tag' AS tag, payload->>'intent' AS intent,
           coalesce((payload->>'poison')::boolean, false) AS poison,
           available_at = 'infinity' AS available_at_infinite,
           (extract(epoch FROM dead_at) * 1000)::float8 AS dead_at_ms,
           (extract(epoch FROM dead_at - first_failed_at) * 1000)::float8 AS recorded_span_ms
    FROM outbox ORDER BY aggregate_type, aggregate_id, sequence`.execute(producer)
  const { rows: changes } = await sql<{ tag: string; order_id: string; aggregate_type: string }>`
    SELECT tag, order_id, aggregate_type FROM order_changes`.execute(producer)
  const { rows: orders } = await sql<{ id: string; version: number }>`SELECT id, version FROM orders`.execute(
    producer,
  )
  const { rows: counters } = await sql<{
    aggregate_type: string
    aggregate_id: string
    last_sequence: string
  }>`
    SELECT aggregate_type, aggregate_id, last_sequence FROM outbox_counter`.execute(producer)
  const { rows: lanes } = await sql<{
    aggregate_type: string
    aggregate_id: string
    blocked_reason: string | null
  }>`
    SELECT aggregate_type, aggregate_id, blocked_reason FROM outbox_lane`.execute(producer)
  const outboxStats = await stats(producer)
  const integrity = await checkIntegrity(producer, { maxLeaseMs: run.leaseMs })

  const { rows: applied } = await sql<AppliedRow>`
    SELECT id, event_id, aggregate_type, aggregate_id, sequence::int AS sequence, tag FROM applied_log ORDER BY id`.execute(
    subscriber,
  )
  const { rows: appliedCounters } = await sql<{
    aggregate_type: string
    aggregate_id: string
    applied: number
  }>`
    SELECT aggregate_type, aggregate_id, applied FROM aggregate_counter`.execute(subscriber)
  const { rows: processed } = await sql<{ event_id: string }>`SELECT event_id FROM processed_events`.execute(
    subscriber,
  )
  const { rows: cursors } = await sql<{
    aggregate_type: string
    aggregate_id: string
    last_sequence: string
  }>`
    SELECT aggregate_type, aggregate_id, last_sequence FROM consumer_cursors`.execute(subscriber)

  // ---- Producer: the write path under restarts and rollbacks.
  const outboxById = new Map(outbox.map((row) => [row.event_id, row]))
  const outboxTags = new Set(outbox.map((row) => row.tag ?? ''))
  const changeTags = new Set(changes.map((row) => row.tag))
  const eventsWithoutChange = outbox.filter((row) => !changeTags.has(row.tag ?? ''))
  const changesWithoutEvent = changes.filter((row) => !outboxTags.has(row.tag))
  if (eventsWithoutChange.length > 0 || changesWithoutEvent.length > 0) {
    fail(
      'producer: event and business write commit together',
      `${eventsWithoutChange.length} events without their order change, ${changesWithoutEvent.length} order changes without their event`,
      [
        ...eventsWithoutChange.map((row) => `event ${row.event_id} tag ${row.tag}`),
        ...changesWithoutEvent.map((row) => `change ${row.tag}`),
      ],
    )
  }
  const changesPerOrder = groupBy(changes, (row) => row.order_id)
  const wrongVersions = orders.filter(
    (order) => (changesPerOrder.get(order.id)?.length ?? 0) !== order.version,
  )
  if (wrongVersions.length > 0 || orders.length !== changesPerOrder.size) {
    fail(
      'producer: order versions match the committed changes',
      `${wrongVersions.length} orders whose version is not their number of committed changes`,
      wrongVersions.map(
        (order) =>
          `order ${order.id}: version ${order.version}, ${changesPerOrder.get(order.id)?.length ?? 0} changes`,
      ),
    )
  }
  const rolledBack = outbox.filter((row) => row.intent !== 'commit')
  if (rolledBack.length > 0) {
    fail(
      'producer: no rolled-back event exists',
      `${rolledBack.length} outbox rows from transactions that rolled back (or without a tag)`,
      rolledBack.map((row) => `${row.event_id} tag ${row.tag} intent ${row.intent}`),
    )
  }
  const byAggregate = groupBy(outbox, key)
  const counterOf = new Map(counters.map((row) => [key(row), Number(row.last_sequence)]))
  const gappy: string[] = []
  for (const [aggregate, rows] of byAggregate) {
    const ok =
      rows.every((row, index) => row.sequence === index + 1) && counterOf.get(aggregate) === rows.length
    if (!ok)
      gappy.push(
        `${aggregate}: sequences ${rows.map((row) => row.sequence).join(',')} counter ${counterOf.get(aggregate)}`,
      )
  }
  if (gappy.length > 0)
    fail(
      'producer: sequences are 1…n without gaps',
      `${gappy.length} aggregates with gaps or a wrong counter`,
      gappy,
    )

  // ---- What should have happened to each event, by mode.
  const poisonEvents = outbox.filter((row) => row.poison)
  // Under 'block' a poisoned lane stops at its first poison event: it is dead, everything behind it waits.
  const firstPoison = new Map<string, number>()
  for (const row of poisonEvents) {
    const aggregate = key(row)
    firstPoison.set(aggregate, Math.min(firstPoison.get(aggregate) ?? Number.POSITIVE_INFINITY, row.sequence))
  }
  const fate = (row: OutboxRow): 'applied' | 'dead' | 'stalled' => {
    if (mode === 'normal') return 'applied'
    // Any event may die here; whether it had the right to is checked from the proxy's account below.
    if (mode === 'retry-after') return row.status === 'dead' ? 'dead' : 'applied'
    if (mode === 'poison-skip') return row.poison ? 'dead' : 'applied'
    const stop = firstPoison.get(key(row))
    if (stop === undefined || row.sequence < stop) return 'applied'
    return row.sequence === stop ? 'dead' : 'stalled'
  }
  const expectedApplied = outbox.filter((row) => fate(row) === 'applied')
  const expectedDead = outbox.filter((row) => fate(row) === 'dead')
  const expectedStalled = outbox.filter((row) => fate(row) === 'stalled')

  // ---- Relay: drained, dead letters and blocked lanes exactly as the mode says.
  const pendingRows = expectedApplied.filter((row) => row.status === 'pending')
  if (pendingRows.length > 0) {
    fail(
      'relay: nothing pending',
      `${pendingRows.length} events still pending after the drain${mode === 'poison-block' ? ' that no poison holds back' : ''}`,
      pendingRows.map((row) => `${key(row)}#${row.sequence} ${row.event_id} attempts ${row.attempts}`),
    )
  }
  // DESIGN: a lane parked by 'block' keeps its rows at available_at = 'infinity' until a redrive; a row that looks
  // due in a lane no claim may take sits in every claim's scan of the due index.
  const unparked = expectedStalled.filter((row) => row.status !== 'pending' || !row.available_at_infinite)
  if (unparked.length > 0) {
    fail(
      'relay: events behind a blocked head wait, parked at available_at = infinity',
      `${unparked.length} of ${expectedStalled.length} events behind a blocked head are not parked`,
      unparked.map(
        (row) =>
          `${key(row)}#${row.sequence} ${row.event_id} status ${row.status}${row.status === 'pending' ? ', due (not infinity)' : ''}`,
      ),
    )
  }
  const wrongDead = outbox.filter((row) => (row.status === 'dead') !== (fate(row) === 'dead'))
  if (wrongDead.length > 0) {
    fail(
      mode === 'normal'
        ? 'relay: nothing dead-lettered'
        : 'relay: exactly the poison events are dead-lettered',
      `${wrongDead.length} events dead-lettered or not against expectation (${expectedDead.length} expected dead)`,
      wrongDead.map(
        (row) => `${key(row)}#${row.sequence} ${row.event_id} status ${row.status} poison ${row.poison}`,
      ),
    )
  }
  const otherStatus = outbox.filter(
    (row) =>
      fate(row) === 'applied' && row.status !== 'sent' && row.status !== 'pending' && row.status !== 'dead',
  )
  if (otherStatus.length > 0) {
    fail(
      'relay: every event ends as the mode says',
      `${otherStatus.length} events in an unexpected state`,
      otherStatus.map((row) => `${key(row)}#${row.sequence} status ${row.status} expected ${fate(row)}`),
    )
  }
  const blockedLanes = lanes.filter((lane) => lane.blocked_reason !== null)
  const expectedBlocked = mode === 'poison-block' ? new Set(firstPoison.keys()) : new Set<string>()
  const wrongBlocked = [
    ...blockedLanes
      .filter((lane) => !expectedBlocked.has(key(lane)) || lane.blocked_reason !== 'exhausted')
      .map((lane) => `${key(lane)} blocked (${lane.blocked_reason}) unexpectedly`),
    ...[...expectedBlocked]
      .filter((aggregate) => !blockedLanes.some((lane) => key(lane) === aggregate))
      .map((aggregate) => `${aggregate} should be blocked`),
  ]
  if (wrongBlocked.length > 0 || outboxStats.blocked !== expectedBlocked.size) {
    fail(
      mode === 'poison-block' ? 'relay: exactly the poisoned lanes are blocked' : 'relay: no lane blocked',
      `stats say ${outboxStats.blocked} blocked, expected ${expectedBlocked.size}`,
      wrongBlocked,
    )
  }

  // Counted from the proxy's account, never from the outbox's `attempts` or `first_failed_at`: those are what the
  // relay's give-up rule reads, so they cannot vouch for it. Requests open at a relay kill count (a takeover may
  // charge them), 409s do not, and so do 2xx answers: a dead letter's relay evidently did not take them (it
  // sent the event again), most likely a timeout that fired while its event loop stalled with the answer waiting.
  // The first failure's time is its arrival at the proxy, before the relay could have recorded it, so the span
  // measured here is never shorter than the relay's.
  const unearned: string[] = []
  const deadRequests: number[] = []
  const deadSpans: number[] = []
  for (const row of outbox.filter((one) => one.status === 'dead')) {
    const seen = run.requestsByEvent.get(row.event_id)
    const failed = seen?.failedAt.length ?? 0
    const killed = seen?.killedAt.length ?? 0
    const answered = seen?.deliveredAt.length ?? 0
    const firstMs = Math.min(
      ...(seen?.failedAt ?? []),
      ...(seen?.killedAt ?? []),
      ...(seen?.deliveredAt ?? []),
    )
    const spanMs = (row.dead_at_ms ?? Number.NEGATIVE_INFINITY) - firstMs
    deadRequests.push(failed + killed + answered)
    deadSpans.push(spanMs)
    if (failed + killed + answered < run.maxAttempts || !(spanMs >= run.horizonMs)) {
      unearned.push(
        `${key(row)}#${row.sequence} ${row.event_id}: ${failed} failed requests + ${killed} open at a relay kill + ${answered} answered 2xx yet sent again (maxAttempts ${run.maxAttempts}); dead ${Number.isFinite(spanMs) ? `${Math.round(spanMs)} ms` : 'with no request'} after its first (horizon ${run.horizonMs} ms)`,
      )
    }
  }
  if (unearned.length > 0) {
    fail(
      'relay: an event is dead only if it used its own attempts (maxAttempts requests, the horizon since the first)',
      `${unearned.length} dead letters gave up early, by the proxy's count`,
      unearned,
    )
  }
  if (!integrity.ok) {
    fail(
      'producer: checkIntegrity finds every lane live',
      `${integrity.violations.length} broken liveness rules`,
      integrity.violations.map(
        (violation) =>
          `${violation.kind} ${violation.aggregateType}:${violation.aggregateId} — ${violation.detail}`,
      ),
    )
  }

  // ---- Subscriber: exactly once, nothing else, in order.
  const appliedById = groupBy(applied, (row) => row.event_id)
  const missing = expectedApplied.filter((row) => !appliedById.has(row.event_id))
  if (missing.length > 0) {
    fail(
      'subscriber: every committed event applied (none lost)',
      `${missing.length} of ${expectedApplied.length} events never applied`,
      missing.map(
        (row) => `${key(row)}#${row.sequence} ${row.event_id} status ${row.status} attempts ${row.attempts}`,
      ),
    )
  }
  const twice = [...appliedById].filter(([, rows]) => rows.length > 1)
  if (twice.length > 0) {
    fail(
      'subscriber: no event applied twice',
      `${twice.length} events applied more than once`,
      twice.map(
        ([eventId, rows]) =>
          `${eventId} applied ${rows.length}× (log ids ${rows.map((row) => row.id).join(',')})`,
      ),
    )
  }
  const unknown = applied.filter((row) => !outboxById.has(row.event_id))
  if (unknown.length > 0) {
    fail(
      'subscriber: never saw an event the producer did not commit (rolled back)',
      `${unknown.length} applied events absent from the producer database`,
      unknown.map((row) => `${row.event_id} tag ${row.tag}`),
    )
  }
  const unknownSent = [...run.sentEventIds].filter((eventId) => !outboxById.has(eventId))
  if (unknownSent.length > 0) {
    fail(
      'relay: never sent an event the producer did not commit (rolled back)',
      `${unknownSent.length} event ids on the wire that the producer database does not have`,
      unknownSent,
    )
  }
  // Under 'retry-after' a dead letter's last request may have been applied with its answer lost (a dropped
  // answer, a slow subscriber): applied once and in order, that is the at-least-once ambiguity, not a hole.
  const appliedDead =
    mode === 'retry-after' ? expectedDead.filter((row) => appliedById.has(row.event_id)) : []
  const appliedDeadIds = new Set(appliedDead.map((row) => row.event_id))
  const shouldBeApplied = [...expectedApplied, ...appliedDead].sort(
    (a, b) => key(a).localeCompare(key(b)) || a.sequence - b.sequence,
  )
  const notExpected = applied.filter((row) => {
    const source = outboxById.get(row.event_id)
    return source !== undefined && fate(source) !== 'applied' && !appliedDeadIds.has(row.event_id)
  })
  if (notExpected.length > 0) {
    fail(
      'subscriber: no poison or stalled event applied',
      `${notExpected.length} applied events that must not have been`,
      notExpected.map((row) => `${key(row)}#${row.sequence} ${row.event_id}`),
    )
  }
  const mismatched = applied.filter((row) => {
    const source = outboxById.get(row.event_id)
    return (
      source !== undefined &&
      (key(source) !== key(row) || source.sequence !== row.sequence || source.tag !== row.tag)
    )
  })
  if (mismatched.length > 0) {
    fail(
      'subscriber: applied events carry the producer’s aggregate, sequence and payload',
      `${mismatched.length} applied events differ from their outbox row`,
      mismatched.map((row) => `${row.event_id}: applied ${key(row)}#${row.sequence} ${row.tag}`),
    )
  }
  const expectedByAggregate = groupBy(shouldBeApplied, key)
  const appliedByAggregate = groupBy(applied, key)
  const disordered: string[] = []
  for (const aggregate of new Set([...expectedByAggregate.keys(), ...appliedByAggregate.keys()])) {
    const want = (expectedByAggregate.get(aggregate) ?? []).map((row) => row.sequence)
    const got = (appliedByAggregate.get(aggregate) ?? []).map((row) => row.sequence)
    if (want.join(',') !== got.join(','))
      disordered.push(`${aggregate}: applied ${got.join(',')} expected ${want.join(',')}`)
  }
  if (disordered.length > 0) {
    fail(
      mode === 'poison-skip' || mode === 'retry-after'
        ? 'subscriber: per aggregate strictly increasing, gap-free except dead letters'
        : 'subscriber: per aggregate strictly increasing and gap-free',
      `${disordered.length} aggregates applied out of order, with gaps or repeats (in applied_log order)`,
      disordered,
    )
  }
  const wrongCounters = [...expectedByAggregate]
    .filter(
      ([aggregate, rows]) => appliedCounters.find((row) => key(row) === aggregate)?.applied !== rows.length,
    )
    .map(
      ([aggregate, rows]) =>
        `${aggregate}: counter ${appliedCounters.find((row) => key(row) === aggregate)?.applied} expected ${rows.length}`,
    )
  const strayCounters = appliedCounters.filter((row) => !expectedByAggregate.has(key(row)))
  if (wrongCounters.length > 0 || strayCounters.length > 0) {
    fail(
      'subscriber: each aggregate’s counter equals its applied events',
      `${wrongCounters.length + strayCounters.length} counters off`,
      [...wrongCounters, ...strayCounters.map((row) => `${key(row)}: counter ${row.applied} expected none`)],
    )
  }
  const processedIds = new Set(processed.map((row) => row.event_id))
  const expectedIds = new Set(shouldBeApplied.map((row) => row.event_id))
  // Under 'skip' a dead-lettered event's lane moves on; a late copy of it (a held request) then reaches the
  // subscriber after later events and is recorded as stale_ignored — recorded, never applied, as designed.
  const deadIds = new Set(expectedDead.map((row) => row.event_id))
  const staleDead =
    mode === 'poison-skip' || mode === 'retry-after'
      ? processed.filter((row) => deadIds.has(row.event_id) && !appliedDeadIds.has(row.event_id))
      : []
  const processedWrong = [
    ...processed
      .filter((row) => !expectedIds.has(row.event_id) && !staleDead.includes(row))
      .map((row) => `${row.event_id} recorded, not expected`),
    ...shouldBeApplied
      .filter((row) => !processedIds.has(row.event_id))
      .map((row) => `${row.event_id} not recorded`),
  ]
  if (processedWrong.length > 0) {
    fail(
      mode === 'poison-skip' || mode === 'retry-after'
        ? 'subscriber: processed_events records the applied events (and at most late copies of dead letters)'
        : 'subscriber: processed_events records exactly the applied events',
      `${processedWrong.length} differences (a stale_ignored event here means it arrived out of order)`,
      processedWrong,
    )
  }
  const cursorWrong = [...expectedByAggregate]
    .map(([aggregate, rows]) => ({
      aggregate,
      want: Math.max(...rows.map((row) => row.sequence)),
      got: Number(cursors.find((row) => key(row) === aggregate)?.last_sequence ?? 0),
    }))
    .filter(({ want, got }) => want !== got)
  if (cursorWrong.length > 0) {
    fail(
      'subscriber: cursors stand at each aggregate’s last applied sequence',
      `${cursorWrong.length} cursors off`,
      cursorWrong.map(({ aggregate, want, got }) => `${aggregate}: cursor ${got} expected ${want}`),
    )
  }

  const recordedSpans = outbox
    .filter((row) => row.status === 'dead')
    .map((row) => row.recorded_span_ms ?? Number.NEGATIVE_INFINITY)
  // Failed requests only, kills left out, and none that ended the event's requests (a late 2xx judged failed may
  // have been the one that got through): each counted here the relay surely took as an attempt.
  const sentFailures = outbox
    .filter((row) => row.status === 'sent')
    .map((row) => {
      const seen = run.requestsByEvent.get(row.event_id)
      return (seen?.failedAt.length ?? 0) - (seen?.last === 'failed' ? 1 : 0)
    })
  return {
    violations,
    figures: {
      eventsCommitted: outbox.length,
      transactionsCommitted: new Set(outbox.map((row) => (row.tag ?? '').split('.').slice(0, 4).join('.')))
        .size,
      aggregates: byAggregate.size,
      poisonCommitted: poisonEvents.length,
      sent: outbox.filter((row) => row.status === 'sent').length,
      pending: outbox.filter((row) => row.status === 'pending').length,
      dead: outbox.filter((row) => row.status === 'dead').length,
      blockedLanes: blockedLanes.length,
      stalled: expectedStalled.length,
      attempts: outbox.reduce((sum, row) => sum + row.attempts, 0),
      applied: applied.length,
      processedEvents: processed.length,
      deadRecordedStale: staleDead.length,
      deadApplied: appliedDead.length,
      integrityFindings: integrity.findings.length,
    },
    ledger: {
      maxAttempts: run.maxAttempts,
      horizonMs: run.horizonMs,
      sentPastMaxAttempts: sentFailures.filter((failures) => failures >= run.maxAttempts).length,
      mostFailuresBeforeSent: Math.max(0, ...sentFailures),
      deadFewestRequests: deadRequests.length > 0 ? Math.min(...deadRequests) : null,
      deadShortestSpanMs: deadSpans.length > 0 ? Math.round(Math.min(...deadSpans)) : null,
      deadShortestRecordedSpanMs: deadSpans.length > 0 ? Math.round(Math.min(...recordedSpans)) : null,
    },
  }
}
