import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { ChaosRunResult } from './run-chaos.js'

/** The CI-sized run takes about two minutes on an idle two-core machine; this allows for a busy one. */
const RUN_DEADLINE_MS = 300_000

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('./run.ts', import.meta.url))
let child: ChildProcess | undefined

afterAll(() => {
  // A timed-out run must not keep its processes: the orchestrator cleans up on SIGTERM (and on stdin closing).
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
})

/** Whether `pid` is still one of the run's chaos processes (PIDs wrap, so a live PID alone proves nothing). */
function stillOurs(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('chaos/processes/')
  } catch {
    // Gone between the two checks; without /proc (not Linux) a live PID is all we can go by.
    return !existsSync('/proc/self')
  }
}

describe('chaos: the guarantee under kill -9, a failing endpoint and PostgreSQL restarts (CI size)', () => {
  it('every committed event applied exactly once and in order; poison dead-lettered (skip) or its lane stalled (block); none dead before its own attempts', {
    timeout: RUN_DEADLINE_MS + 60_000,
  }, async () => {
    // A fresh seed each CI run covers more plans over time; the failure message carries it for a replay.
    const seed = process.env.OUTBOX_CHAOS_SEED ?? String(Math.floor(Math.random() * 1_000_000))
    const json = join(tmpdir(), `outbox-chaos-${seed}-${process.pid}.json`)
    child = spawn(
      process.execPath,
      [
        '--conditions=@outbox/source',
        '--import',
        tsx,
        script,
        '--duration',
        '30',
        '--poison-duration',
        '8',
        '--retry-after-duration',
        '10',
        '--seed',
        seed,
        '--json',
        json,
        '--stop-on-stdin-close',
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    )
    let output = ''
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    // Our own deadline, below vitest's: on a machine too busy to finish, stop the run (it cleans up on SIGTERM)
    // and fail with its output rather than with a bare timeout.
    const exited = once(child, 'exit') as Promise<[number | null]>
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), RUN_DEADLINE_MS)
    })
    const first = await Promise.race([exited, deadline])
    clearTimeout(timer)
    if (first === 'late') {
      child.kill('SIGTERM')
      await exited
      throw new Error(
        `the chaos run (seed ${seed}) did not finish within ${RUN_DEADLINE_MS / 1000} s:\n${output}`,
      )
    }
    const [code] = first
    let report: { seed: number; replay: string; spawnedPids: number[]; results: ChaosRunResult[] }
    try {
      report = JSON.parse(readFileSync(json, 'utf8'))
    } catch {
      throw new Error(`the chaos run (seed ${seed}) exited ${code} without a report:\n${output}`)
    } finally {
      rmSync(json, { force: true })
    }
    const context = `seed ${seed}; replay: ${report.replay}\n${output}`

    expect(code, context).toBe(0)
    expect(
      report.results.map((result) => [result.mode, result.violations]),
      context,
    ).toEqual([
      ['normal', []],
      ['poison-skip', []],
      ['poison-block', []],
      ['retry-after', []],
    ])
    // The run must have done what it claims, or the invariants above prove nothing.
    const [normal, skip, block, retryAfter] = report.results as [
      ChaosRunResult,
      ChaosRunResult,
      ChaosRunResult,
      ChaosRunResult,
    ]
    const relayKills = normal.faults.relayKills
    expect(relayKills.timer + relayKills.midRequest + relayKills.afterApply, context).toBeGreaterThan(0)
    expect(normal.faults.subscriberKills, context).toBeGreaterThan(0)
    expect(normal.faults.postgresRestarts, context).toEqual({ producer: 1, subscriber: 1 })
    expect(normal.database.eventsCommitted, context).toBeGreaterThan(100)
    expect(normal.workers.rolledBack, context).toBeGreaterThan(0)
    expect(normal.proxy.answers.duplicate_ignored, context).toBeGreaterThan(0)
    for (const fault of ['error500', 'unavailable503', 'hold', 'reset', 'dropResponse'] as const) {
      expect(normal.proxy.faults[fault], `${fault} never injected; ${context}`).toBeGreaterThan(0)
    }
    expect(skip.database.poisonCommitted, context).toBeGreaterThan(0)
    expect(skip.database.dead, context).toBe(skip.database.poisonCommitted)
    expect(block.database.blockedLanes, context).toBeGreaterThan(0)
    expect(
      retryAfter.proxy.faults.unavailable503 + retryAfter.proxy.faults.throttled429,
      context,
    ).toBeGreaterThan(0)
    // Proof the horizon held events back: sent after at least maxAttempts failures, where counting attempts alone
    // would have dead-lettered them.
    expect(retryAfter.ledger.sentPastMaxAttempts, context).toBeGreaterThan(0)
    // Nothing the run started outlives it.
    expect(report.spawnedPids.filter(stillOurs), context).toEqual([])
  })
})
