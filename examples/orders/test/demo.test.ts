import { spawn } from 'node:child_process'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, inject, it } from 'vitest'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const DEMO = join(ROOT, 'examples/orders/src/demo.ts')

/** The demo's subscribers, in the order of the summary's columns. */
const SUBSCRIBERS = ['billing', 'analytics'] as const

interface DemoRun {
  readonly code: number | null
  readonly output: string
  /** A figure all subscribers share, e.g. `figure('events created')`. */
  figure(label: string): number
  /** A figure of each subscriber, by name, e.g. `figures('lost')` → `{ billing: 0, analytics: 0 }`. */
  figures(label: string): Record<(typeof SUBSCRIBERS)[number], number>
}

/** The whole numbers of a summary row, in column order (the note after them is not read). */
function rowValues(output: string, label: string): number[] {
  const summary = output.split('\nSummary\n')[1] ?? ''
  const match = new RegExp(`^ +${label} {2,}([\\d,]+(?: {2,}[\\d,]+)*)`, 'm').exec(summary)
  if (!match?.[1]) throw new Error(`no "${label}" row in the summary:\n${output}`)
  return match[1].split(/ +/).map((value) => Number(value.replaceAll(',', '')))
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
          const values = rowValues(output, label)
          if (values.length !== 1) throw new Error(`"${label}" is not a shared figure:\n${output}`)
          return values[0]!
        },
        figures(label) {
          const values = rowValues(output, label)
          if (values.length !== SUBSCRIBERS.length) {
            throw new Error(`"${label}" has no figure for each subscriber:\n${output}`)
          }
          const [billing = Number.NaN, analytics = Number.NaN] = values
          return { billing, analytics }
        },
      })
    })
  })
}

// Concurrent: each run is its own process with its own databases, and most of a run is waiting.
describe.concurrent('pnpm demo', () => {
  it('passes its own check at a small size for both subscribers: nothing lost, nothing out of order, though deliveries failed and repeated, and one subscriber misbehaved badly', async () => {
    // As a new user runs it: an embedded PostgreSQL, unless DATABASE_URL names a server to use. 60 orders (240
    // events to each of two subscribers) keep the run about as long as 100 orders to one subscriber did.
    const run = await runDemo(['--orders', '60', '--updates', '3', '--seed', '7'], process.env, 60_000)

    expect(run.code, run.output).toBe(0)
    expect(run.output).toMatch(/^PASS: lost 0, out of order 0 for billing and analytics/m)
    expect(run.output).toMatch(/^ +billing +analytics$/m) // one column per subscriber, in this order
    expect(run.output).toMatch(/^ {2}analytics misbehaves: fails 48\.8% of webhooks.*answers 20–100 ms late/m)
    expect(run.figure('orders placed')).toBe(60)
    expect(run.figure('events created')).toBe(240)
    expect(run.figures('applied')).toEqual({ billing: 240, analytics: 240 })
    expect(run.figures('lost')).toEqual({ billing: 0, analytics: 0 })
    expect(run.figures('out of order')).toEqual({ billing: 0, analytics: 0 })
    expect(run.figures('applied twice')).toEqual({ billing: 0, analytics: 0 })
    expect(run.figures('copies differing')).toEqual({ billing: 0, analytics: 0 })
    expect(run.figure('stuck lanes')).toBe(0)
    // The faults really happened to each: failed requests were retried and dropped answers redelivered as
    // duplicates.
    const failed = run.figures('failed on purpose')
    const attempts = run.figures('delivery attempts')
    for (const name of SUBSCRIBERS) {
      expect(failed[name], name).toBeGreaterThan(0)
      expect(attempts[name], name).toBeGreaterThan(240)
      expect(run.figures('duplicates ignored')[name], name).toBeGreaterThan(0)
    }
    // And analytics misbehaved far more than billing, which still lost nothing and kept its order.
    expect(failed.analytics).toBeGreaterThan(2 * failed.billing)
  }, 90_000)

  it('fails its check when events are lost: subscribers that always fail get every event dead-lettered, each after its own schedule', async () => {
    // On the suite's server (scratch databases), to save starting another one.
    const env = { ...process.env, DATABASE_URL: inject('outboxAdminUrl') }
    const run = await runDemo(
      ['--orders', '4', '--updates', '0', '--failure-rate', '1', '--seed', '1'],
      env,
      60_000,
    )

    expect(run.code, run.output).toBe(1)
    expect(run.output).toMatch(
      /^FAIL: billing: 4 committed event\(s\) were never applied.*; analytics: 4 committed event\(s\) were never applied/m,
    )
    expect(run.figure('events created')).toBe(4)
    // Every attempt of each subscription's own schedule (billing 11, analytics 25), then dead.
    expect(run.figures('delivery attempts')).toEqual({ billing: 4 * 11, analytics: 4 * 25 })
    expect(run.figures('applied')).toEqual({ billing: 0, analytics: 0 })
    expect(run.figures('dead-lettered')).toEqual({ billing: 4, analytics: 4 })
    expect(run.figures('lost')).toEqual({ billing: 4, analytics: 4 })
  }, 90_000)

  it('refuses a bad option with exit code 2 before starting anything', async () => {
    const run = await runDemo(['--orders', 'many'], process.env, 30_000)

    expect(run.code).toBe(2)
    expect(run.output).toContain('--orders must be a whole number, got "many"')
    expect(run.output).not.toContain('PostgreSQL')
  }, 40_000)
})
