import { spawn } from 'node:child_process'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, inject, it } from 'vitest'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const DEMO = join(ROOT, 'examples/orders/src/demo.ts')

interface DemoRun {
  readonly code: number | null
  readonly output: string
  /** A figure of the summary table, e.g. `figure('lost')`. */
  figure(label: string): number
}

/**
 * Runs the demo as `pnpm demo` does, in its own process, and collects what it prints. A run that outlives
 * `timeoutMs` gets SIGINT (the demo cleans up) and, if that does not end it, SIGKILL.
 */
function runDemo(args: readonly string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<DemoRun> {
  return new Promise((resolvePromise, reject) => {
    // `node --import tsx`, as the root script runs it: no launcher process between the demo and its signals.
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=@outbox/source', DEMO, ...args], {
      cwd: ROOT,
      env: { ...env, FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8')
    })
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8')
    })
    const interrupt = setTimeout(() => child.kill('SIGINT'), timeoutMs)
    const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 20_000)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(interrupt)
      clearTimeout(kill)
      resolvePromise({
        code,
        output,
        figure(label) {
          const match = new RegExp(`^ +${label} +([\\d,]+)`, 'm').exec(output.split('\nSummary\n')[1] ?? '')
          if (!match?.[1]) throw new Error(`no "${label}" row in the summary:\n${output}`)
          return Number(match[1].replaceAll(',', ''))
        },
      })
    })
  })
}

// Concurrent: each run is its own process with its own databases, and most of a run is waiting.
describe.concurrent('pnpm demo', () => {
  it('passes its own check at a small size: nothing lost, nothing out of order, though deliveries failed and repeated', async () => {
    // As a new user runs it: an embedded PostgreSQL, unless DATABASE_URL names a server to use.
    const run = await runDemo(['--orders', '100', '--updates', '3', '--seed', '7'], process.env, 60_000)

    expect(run.code, run.output).toBe(0)
    expect(run.output).toMatch(/^PASS: lost 0, out of order 0/m)
    expect(run.figure('orders placed')).toBe(100)
    expect(run.figure('events created')).toBe(400)
    expect(run.figure('applied')).toBe(400)
    expect(run.figure('lost')).toBe(0)
    expect(run.figure('out of order')).toBe(0)
    expect(run.figure('applied twice')).toBe(0)
    expect(run.figure('copies differing')).toBe(0)
    // The faults really happened: failed requests were retried and dropped answers redelivered as duplicates.
    expect(run.figure('failed on purpose')).toBeGreaterThan(0)
    expect(run.figure('delivery attempts')).toBeGreaterThan(400)
    expect(run.figure('duplicates ignored')).toBeGreaterThan(0)
  }, 90_000)

  it('fails its check when events are lost: a subscriber that always fails gets every event dead-lettered', async () => {
    // On the suite's server (scratch databases), to save starting another one.
    const env = { ...process.env, DATABASE_URL: inject('outboxAdminUrl') }
    const run = await runDemo(
      ['--orders', '4', '--updates', '0', '--failure-rate', '1', '--seed', '1'],
      env,
      60_000,
    )

    expect(run.code, run.output).toBe(1)
    expect(run.output).toMatch(/^FAIL: 4 committed event\(s\) were never applied/m)
    expect(run.figure('events created')).toBe(4)
    expect(run.figure('delivery attempts')).toBe(4 * 11) // every attempt of the demo's schedule, then dead
    expect(run.figure('applied')).toBe(0)
    expect(run.figure('dead-lettered')).toBe(4)
    expect(run.figure('lost')).toBe(4)
  }, 90_000)

  it('refuses a bad option with exit code 2 before starting anything', async () => {
    const run = await runDemo(['--orders', 'many'], process.env, 30_000)

    expect(run.code).toBe(2)
    expect(run.output).toContain('--orders must be a whole number, got "many"')
    expect(run.output).not.toContain('PostgreSQL')
  }, 40_000)
})
