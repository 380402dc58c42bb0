// The fault-injection run: `pnpm test:chaos --duration 60 --seed 7`. See README.md next to this file.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { type RunningPostgres, startPostgres } from '@outbox/test-harness'
import type { ChaosMode } from './check-invariants.js'
import { killAllChildren } from './child-process.js'
import { formatReport } from './report.js'
import { type ChaosRunResult, randomSeed, runChaos } from './run-chaos.js'

const USAGE = `usage: pnpm test:chaos [--duration <s>] [--seed <n>]
                       [--mode normal|poison-skip|poison-block|retry-after|all]
                       [--poison-duration <s>] [--retry-after-duration <s>] [--json <file>] [--keep-logs] [--trace]`

const ALL_MODES: readonly ChaosMode[] = ['normal', 'poison-skip', 'poison-block', 'retry-after']

function usage(message: string): never {
  console.error(`${message}\n${USAGE}`)
  process.exit(2)
}

function positive(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback
  const parsed = Number(value)
  if (!Number.isFinite(parsed) || parsed <= 0) usage(`--${name} must be a positive number, got ${value}`)
  return parsed
}

const { values } = (() => {
  try {
    return parseArgs({
      options: {
        duration: { type: 'string' },
        seed: { type: 'string' },
        mode: { type: 'string' },
        'poison-duration': { type: 'string' },
        'retry-after-duration': { type: 'string' },
        json: { type: 'string' },
        'keep-logs': { type: 'boolean' },
        trace: { type: 'boolean' },
        // Used by the test suite: exit (cleaning up) when the parent's end of stdin closes.
        'stop-on-stdin-close': { type: 'boolean' },
      },
    })
  } catch (error) {
    return usage(error instanceof Error ? error.message : String(error))
  }
})()

const durationS = positive(values.duration, 'duration', 60)
const poisonDurationS = positive(
  values['poison-duration'],
  'poison-duration',
  Math.min(30, Math.max(8, Math.round(durationS / 4))),
)
const retryAfterDurationS = positive(
  values['retry-after-duration'],
  'retry-after-duration',
  Math.min(30, Math.max(10, Math.round(durationS / 3))),
)
if (values.seed !== undefined && !/^\d{1,9}$/.test(values.seed))
  usage(`--seed must be an integer, got ${values.seed}`)
const seed = values.seed === undefined ? randomSeed() : Number(values.seed)
const mode = values.mode ?? 'all'
if (mode !== 'all' && !ALL_MODES.includes(mode as ChaosMode)) usage(`unknown --mode ${mode}`)
const modes = mode === 'all' ? ALL_MODES : [mode as ChaosMode]
const replay = `pnpm test:chaos --duration ${durationS} --seed ${seed}${mode === 'all' ? '' : ` --mode ${mode}`}${values['poison-duration'] ? ` --poison-duration ${poisonDurationS}` : ''}${values['retry-after-duration'] ? ` --retry-after-duration ${retryAfterDurationS}` : ''}`
/** Each mode's fault phase: `--duration` is the normal mode's; the finite-schedule modes have their own. */
const phaseS: Record<ChaosMode, number> = {
  normal: durationS,
  'poison-skip': poisonDurationS,
  'poison-block': poisonDurationS,
  'retry-after': retryAfterDurationS,
}

const servers: RunningPostgres[] = []
const logDir = mkdtempSync(join(tmpdir(), `outbox-chaos-${seed}-`))
let finishing = false

/** Kills the children (by PID) and stops both PostgreSQL servers, whatever state the run is in. */
async function cleanUp(): Promise<void> {
  killAllChildren()
  await Promise.allSettled(servers.map((server) => server.stop()))
}

function interrupted(signal: string): void {
  if (finishing) return
  finishing = true
  console.error(
    `\n${signal}: stopping every chaos process and both PostgreSQL servers (logs kept in ${logDir})`,
  )
  killAllChildren()
  void cleanUp().finally(() => process.exit(130))
}
process.once('SIGINT', () => interrupted('SIGINT'))
process.once('SIGTERM', () => interrupted('SIGTERM'))
if (values['stop-on-stdin-close']) {
  process.stdin.on('end', () => interrupted('parent gone'))
  process.stdin.on('close', () => interrupted('parent gone'))
  process.stdin.resume()
}

console.log(`chaos: seed ${seed}, modes ${modes.join(', ')}; replay with: ${replay}`)
const results: ChaosRunResult[] = []
/** Every child process the run spawned, so a caller can check that none outlived it. */
const spawnedPids: number[] = []
let exitCode = 0
const started = performance.now()
try {
  // Its own servers, whatever DATABASE_URL says: the run restarts them.
  servers.push(await startPostgres(), await startPostgres())
  const [producer, subscriber] = servers as [RunningPostgres, RunningPostgres]
  const run = (one: ChaosMode) =>
    runChaos(
      { producer, subscriber },
      {
        mode: one,
        seed,
        durationMs: phaseS[one] * 1000,
        logDir,
        log: (line) => console.log(line),
        onSpawn: (pid) => spawnedPids.push(pid),
        trace: values.trace === true,
      },
    )
  // One mode at a time: side by side they overload a two-core machine, and an overloaded subscriber answering
  // after the relays' timeout would exhaust ordinary events too under the poison modes' finite schedule.
  for (const one of modes) {
    const result = await run(one)
    results.push(result)
    console.log(formatReport(result))
    if (result.violations.length > 0) exitCode = 1
  }
} catch (error) {
  console.error('chaos: the harness failed (not an invariant):', error)
  exitCode = 3
} finally {
  finishing = true
  await cleanUp()
}
const totalS = ((performance.now() - started) / 1000).toFixed(1)
if (values.json)
  writeFileSync(values.json, JSON.stringify({ seed, replay, exitCode, spawnedPids, results }, null, 2))
if (exitCode === 0) {
  console.log(`chaos: all invariants hold in ${modes.join(', ')} (seed ${seed}, ${totalS} s)`)
  if (!values['keep-logs']) rmSync(logDir, { recursive: true, force: true })
  else console.log(`chaos: logs in ${logDir}`)
} else {
  const broken = results.flatMap((result) =>
    result.violations.map((violation) => `${result.mode}: ${violation.invariant}`),
  )
  console.error(`chaos: FAILED with seed ${seed} after ${totalS} s`)
  for (const line of broken) console.error(`  broken invariant — ${line}`)
  console.error(`  replay: ${replay}`)
  console.error(`  logs (children's stderr, fault timeline): ${logDir}`)
}
process.exit(exitCode)
