import fc from 'fast-check'
import type { BackfillBatch, LaneSystem, SubscriptionFilter, SystemConfig } from './lane-system.js'
import type { Answer } from './model-sink.js'

/** The model's own state: empty, since every command applies to any state (a command with nothing to act on does nothing). */
export type LaneModel = Record<string, never>

type Command = fc.AsyncCommand<LaneModel, LaneSystem>

/** OUTBOX_MODEL_TRACE=1 prints each command with its duration, to see where a run spends its time. */
const trace = process.env.OUTBOX_MODEL_TRACE === '1'

/** A command that acts on the system, then checks every liveness invariant. */
function command(label: string, act: (system: LaneSystem) => Promise<void>): Command {
  return {
    check: () => true,
    async run(_model, system) {
      const started = performance.now()
      try {
        await act(system)
        await system.checkInvariants()
      } finally {
        if (trace) process.stderr.write(`  ${label} ${Math.round(performance.now() - started)} ms\n`)
      }
    },
    toString: () => label,
  }
}

const answers: fc.Arbitrary<Answer> = fc.oneof(
  { arbitrary: fc.constant<Answer>('ok'), weight: 4 },
  { arbitrary: fc.constant<Answer>('ok-then-cut'), weight: 1 },
  { arbitrary: fc.constant<Answer>('409'), weight: 1 },
  { arbitrary: fc.constant<Answer>('500'), weight: 4 },
  {
    arbitrary: fc.record({
      status: fc.constantFrom(429 as const, 503 as const),
      retryAfterSeconds: fc.constantFrom(0, 1, 2),
    }),
    weight: 2,
  },
  { arbitrary: fc.constant<Answer>('cut'), weight: 1 },
)

/** Durations the model moves time by: under and over the request timeout, the lease, the retries and 409 parks. */
const steps = fc.constantFrom(500, 5_000, 5_000, 10_500, 61_000, 300_000, 3_600_000)

/** `count` copies of an arbitrary: fc.commands draws each entry alike, so copies weight a command. */
function times(count: number, arbitrary: fc.Arbitrary<Command>): fc.Arbitrary<Command>[] {
  return Array.from({ length: count }, () => arbitrary)
}

/** The event types and tenants enqueues draw from, and filters are made of: small, so filters often match. */
const eventTypes = fc.constantFrom('order.created', 'order.updated', 'invoice.paid')
const tenants = fc.constantFrom<string | null>(null, 't1', 't2')

const enqueues = fc
  .record({
    aggregate: fc.nat(2),
    end: fc.constantFrom('commit', 'commit', 'commit', 'rollback', 'hold'),
    eventType: eventTypes,
    tenant: tenants,
  })
  .map(({ aggregate, end, eventType, tenant }) =>
    command(`enqueue(a${aggregate}, ${eventType}, tenant ${tenant}, ${end})`, (system) =>
      system.enqueue(aggregate % system.config.aggregates, end as 'commit' | 'rollback' | 'hold', {
        eventType,
        tenant,
      }),
    ),
  )

/**
 * A few committed enqueues in a row: history for a backfill to copy (each aggregate's events in several batches when
 * they are small), and a backlog for the relays.
 */
const bursts = fc
  .array(fc.record({ aggregate: fc.nat(2), eventType: eventTypes, tenant: tenants }), {
    minLength: 2,
    maxLength: 4,
  })
  .map((events) =>
    command(
      `burst(${events.map(({ aggregate, eventType, tenant }) => `a${aggregate} ${eventType} ${tenant}`).join(', ')})`,
      async (system) => {
        for (const { aggregate, eventType, tenant } of events)
          await system.enqueue(aggregate % system.config.aggregates, 'commit', { eventType, tenant })
      },
    ),
  )

const finishes = fc
  .record({ pick: fc.nat(4), end: fc.constantFrom('commit', 'commit', 'rollback') })
  .map(({ pick, end }) =>
    command(`finish(${pick}, ${end})`, (system) => system.finish(pick, end as 'commit')),
  )

const relaySteps = fc
  .record({ relay: fc.nat(2), flush: fc.constantFrom(true, true, true, false) })
  .map(({ relay, flush }) =>
    command(`step(r${relay}${flush ? '' : ', marks left buffered'})`, (system) =>
      system.step(relay % system.config.relays.length, flush),
    ),
  )

const subscriberAnswers = fc
  .record({ pick: fc.nat(4), answer: answers })
  .map(({ pick, answer }) =>
    command(`answer(${pick}, ${JSON.stringify(answer)})`, (system) => system.answer(pick, answer)),
  )

const advances = steps.map((ms) => command(`advance(${ms} ms)`, (system) => system.advance(ms)))

const crashes = fc
  .nat(2)
  .map((relay) => command(`crash(r${relay})`, (system) => system.crash(relay % system.config.relays.length)))

/** A crash with its marks unflushed: a 2xx reaches the relay, which dies before it can record it. */
const answerCrashes = fc
  .nat(4)
  .map((pick) => command(`answerThenCrash(${pick})`, (system) => system.answerThenCrash(pick)))

const stops = fc
  .nat(2)
  .map((relay) => command(`stop(r${relay})`, (system) => system.stop(relay % system.config.relays.length)))

const redrives = fc
  .record({ pick: fc.oneof(fc.constant<'all'>('all'), fc.nat(3)), hold: fc.boolean() })
  .map(({ pick, hold }) =>
    command(`redrive(${pick}${hold ? ', held open' : ''})`, (system) => system.redrive(pick, hold)),
  )

const prunes = fc
  .record({ retention: fc.constantFrom(0, 60_000), deadLetters: fc.constantFrom(0, 60_000, 86_400_000) })
  .map(({ retention, deadLetters }) =>
    command(`prune(${retention} ms, dead ${deadLetters} ms)`, (system) =>
      system.prune(retention, deadLetters),
    ),
  )

/** A subscription's filter: none, a tenant, a type list or prefix, or both. */
const filters: fc.Arbitrary<SubscriptionFilter> = fc.record({
  // '*' is every tenant's events: the API refuses a subscription without a tenant once another one has a tenant.
  tenant: fc.constantFrom('*', 't1', 't2'),
  eventTypes: fc.constantFrom<readonly string[] | null>(
    null,
    null,
    ['order.*'],
    ['order.created'],
    ['invoice.paid', 'order.updated'],
  ),
})

const describeFilter = (filter: SubscriptionFilter) =>
  `tenant ${filter.tenant}, types ${filter.eventTypes === null ? 'all' : filter.eventTypes.join('|')}`

/** Two in three stored subscriptions start at the earliest retained event: a backfill to run beside everything else. */
const creates = fc
  .record({
    slot: fc.nat(1),
    filter: filters,
    startAt: fc.constantFrom('now' as const, 'earliest' as const, 'earliest' as const),
  })
  .map(({ slot, filter, startAt }) =>
    command(`createSubscription(s${slot}, ${describeFilter(filter)}, startAt ${startAt})`, (system) =>
      system.createSubscription(slot, filter, startAt),
    ),
  )

/**
 * A backfill batch: the relay's own step (whole-outbox batches) or a small one through the same SQL function, so a
 * copy spans several batches with commands between them. Now and then it runs even with a transaction held open,
 * to meet the lock timeout (which costs the run 500 ms of real time).
 */
const backfills = fc
  .record({
    relay: fc.nat(2),
    batch: fc.oneof(
      { arbitrary: fc.constant<BackfillBatch>('relay'), weight: 1 },
      {
        arbitrary: fc.record({ aggregates: fc.constantFrom(1, 1, 2), rows: fc.constantFrom(1, 1, 2, 5000) }),
        weight: 3,
      },
    ),
    pick: fc.nat(1),
    evenIfHeld: fc.constantFrom(false, false, false, true),
  })
  .map(({ relay, batch, pick, evenIfHeld }) =>
    command(
      `backfill(${batch === 'relay' ? `relay r${relay}` : `${batch.aggregates} aggregates, ${batch.rows} rows, #${pick}`}${evenIfHeld ? ', even if held' : ''})`,
      (system) => system.backfill(relay, batch, pick, evenIfHeld),
    ),
  )

const filterChanges = fc
  .record({ slot: fc.nat(1), filter: filters })
  .map(({ slot, filter }) =>
    command(`changeFilter(s${slot}, ${describeFilter(filter)})`, (system) =>
      system.changeFilter(slot, filter),
    ),
  )

/** Disable or enable: a stored slot mostly, the implicit subscription now and then. */
const toggles = fc
  .record({
    target: fc.oneof(
      { arbitrary: fc.nat(1), weight: 5 },
      { arbitrary: fc.constant<'implicit'>('implicit'), weight: 1 },
    ),
    enabled: fc.boolean(),
  })
  .map(({ target, enabled }) =>
    command(`${enabled ? 'enable' : 'disable'}(${target === 'implicit' ? target : `s${target}`})`, (system) =>
      system.setEnabled(target, enabled),
    ),
  )

const deletes = fc
  .nat(1)
  .map((slot) => command(`deleteSubscription(s${slot})`, (system) => system.deleteSubscription(slot)))

/**
 * Every command the model draws from, weighted so a run of 60 commands often meets dead letters (failing answers
 * and time enough for backoffs), and then redrives and prunes that race them.
 */
export const laneCommands: fc.Arbitrary<Command>[] = [
  ...times(4, enqueues),
  bursts,
  ...times(2, finishes),
  ...times(7, relaySteps),
  ...times(8, subscriberAnswers),
  ...times(4, advances),
  crashes,
  answerCrashes,
  stops,
  ...times(2, redrives),
  ...times(2, prunes),
  ...times(3, creates),
  ...times(4, backfills),
  filterChanges,
  ...times(2, toggles),
  deletes,
]

/**
 * The shape of a run: 2–3 relays (mixed 'skip'/'block' fleets too) — the first serves the implicit subscription,
 * the second the stored ones, a third either — 2–3 aggregates, 1–3 attempts. One attempt (no retries, a quarter
 * of the runs) keeps dead letters common: with two or more only, few runs failed one event's every attempt once
 * subscriptions and backfills joined the mix (1–3 dead letters in 30 s), and a 45 s CI run met none, failing the
 * test's coverage check.
 */
export const systemConfigs: fc.Arbitrary<SystemConfig> = fc.record({
  relays: fc
    .array(
      fc.record({
        concurrency: fc.integer({ min: 1, max: 2 }),
        onExhausted: fc.constantFrom('skip' as const, 'block' as const),
        serves: fc.constantFrom('implicit' as const, 'stored' as const),
      }),
      { minLength: 2, maxLength: 3 },
    )
    .map((relays) => [
      { ...relays[0]!, serves: 'implicit' as const },
      { ...relays[1]!, serves: 'stored' as const },
      ...relays.slice(2),
    ]),
  aggregates: fc.integer({ min: 2, max: 3 }),
  retrySchedule: fc.constantFrom([], [5_000], [5_000], [5_000, 300_000]),
  batchSize: fc.integer({ min: 1, max: 3 }),
  seed: fc.integer(),
})
