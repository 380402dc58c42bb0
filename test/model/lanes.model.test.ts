import { useTestDatabase } from '@outbox/test-harness'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { laneCommands, systemConfigs } from './lane-commands.js'
import { LaneSystem } from './lane-system.js'
import { createEffects, IMPLICIT } from './model-sink.js'

const producer = useTestDatabase()
const consumer = useTestDatabase()

// CI runs a fixed number of runs (each a fresh outbox) from a fixed seed, so what it covers — and whether it met the
// coverage floors below — is the same on every machine at any load: a budget in runs, not seconds.
// OUTBOX_MODEL_SECONDS asks for a long run instead: a random seed, as many runs as fit in that many seconds (runs
// drawn after the budget is spent pass at once without running: a run is never cut off halfway, so nothing outlives
// the test). OUTBOX_MODEL_RUNS and OUTBOX_MODEL_SEED change the fixed run's count and seed.
// A failure's report replays exactly with OUTBOX_MODEL_SEED, OUTBOX_MODEL_PATH and OUTBOX_MODEL_REPLAY (its seed,
// path and replayPath); OUTBOX_MODEL_TRACE=1 prints each command as it runs.
const CI_RUNS = 40
const CI_SEED = 20_260_135
const seconds =
  process.env.OUTBOX_MODEL_SECONDS === undefined ? undefined : Number(process.env.OUTBOX_MODEL_SECONDS)
const runs = Number(process.env.OUTBOX_MODEL_RUNS ?? CI_RUNS)
const seed =
  process.env.OUTBOX_MODEL_SEED !== undefined
    ? Number(process.env.OUTBOX_MODEL_SEED)
    : seconds === undefined
      ? CI_SEED
      : undefined
const path = process.env.OUTBOX_MODEL_PATH
/** The commands' own replay path (`replayPath="…"` in a failure's report), to replay the shrunk command list. */
const replayPath = process.env.OUTBOX_MODEL_REPLAY
/** Time a failure may spend shrinking to a short path before it is reported as it stands. */
const shrinkSeconds = Number(process.env.OUTBOX_MODEL_SHRINK_SECONDS ?? 120)
const trace = process.env.OUTBOX_MODEL_TRACE === '1'

beforeAll(async () => {
  await createEffects(consumer.db)
})

// Runs before the databases' own cleanup (after hooks run in reverse): a run cut short must hand back its open
// transactions, or closing the pools would wait for them for ever.
afterAll(async () => {
  await Promise.allSettled([...LaneSystem.live].map((system) => system.dispose()))
})

describe('model: the real relay loop, SQL and dedupe against an oracle of the commands alone', () => {
  it('after every command every lane of every subscription can move; after a drain each subscription got exactly what was routed to it, once each, in order, and no event died before it used its own attempts', {
    // The fixed run's ceiling is generous: it bounds a hang, and no verdict depends on it.
    timeout: ((seconds ?? 600) + shrinkSeconds + 120) * 1000,
  }, async () => {
    const deadline = seconds === undefined ? Number.POSITIVE_INFINITY : Date.now() + seconds * 1000
    const tally = {
      runs: 0,
      commands: 0,
      deliveries: 0,
      toStored: 0,
      subscriptions: 0,
      everDead: 0,
      backfillsStarted: 0,
      backfillBatches: 0,
      backfillWaits: 0,
      backfillsDone: 0,
      backfilled: 0,
    }
    await fc.assert(
      fc.asyncProperty(
        systemConfigs,
        fc.commands(laneCommands, {
          maxCommands: 60,
          size: 'large',
          ...(replayPath === undefined ? {} : { replayPath }),
        }),
        async (config, commands) => {
          if (path === undefined && Date.now() > deadline) return
          const started = performance.now()
          const system = await LaneSystem.create(config, producer.db, producer.url, consumer.db)
          const times: number[] = []
          const lap = () => times.push(Math.round(performance.now() - started))
          try {
            lap()
            await fc.asyncModelRun(() => ({ model: {}, real: system }), commands)
            lap()
            await system.drain()
            lap()
            await system.checkInvariants()
            await system.checkOutcome()
          } finally {
            await system.dispose()
            lap()
            if (trace)
              process.stderr.write(`  run: created, commands, drained, disposed at ${times.join(', ')} ms\n`)
          }
          tally.runs += 1
          tally.commands += [...commands].length
          tally.deliveries += system.events.size
          tally.toStored += [...system.events.values()].filter(
            (record) => record.subscription !== IMPLICIT,
          ).length
          tally.subscriptions += system.created
          tally.everDead += [...system.events.values()].filter((record) => record.everDead).length
          tally.backfillsStarted += system.backfills.started
          tally.backfillBatches += system.backfills.batches
          tally.backfillWaits += system.backfills.waited
          tally.backfillsDone += system.backfills.done
          tally.backfilled += [...system.events.values()].filter((record) => record.backfilled).length
        },
      ),
      {
        // A long run stops drawing at its budget on its own; reaching this limit means a failure was still shrinking
        // (or, in the fixed run, that something hung).
        // A replay runs its one counterexample; OUTBOX_MODEL_SHRINK=1 goes on to shrink it (a failure found near the
        // end of a long run may not have had time to).
        ...(path === undefined
          ? seconds === undefined
            ? { numRuns: runs, interruptAfterTimeLimit: (600 + shrinkSeconds) * 1000 }
            : {
                numRuns: Math.max(200, seconds * 4),
                interruptAfterTimeLimit: (seconds + shrinkSeconds) * 1000,
              }
          : {
              numRuns: 1,
              path,
              ...(process.env.OUTBOX_MODEL_SHRINK === '1'
                ? { interruptAfterTimeLimit: shrinkSeconds * 1000 }
                : { endOnFailure: true }),
            }),
        markInterruptAsFailure: true,
        ...(seed === undefined ? {} : { seed }),
      },
    )
    console.log(`[model] ${JSON.stringify(tally)}`)
    // The runs must have been real ones that met dead letters and delivered to stored subscriptions, or the
    // checks above proved little (a replay runs its one counterexample).
    if (path === undefined) {
      expect(tally.runs).toBeGreaterThan(0)
      expect(tally.everDead).toBeGreaterThan(0)
      expect(tally.toStored).toBeGreaterThan(0)
      expect(tally.backfillsDone).toBeGreaterThan(0)
      expect(tally.backfilled).toBeGreaterThan(0)
    }
  })
})
