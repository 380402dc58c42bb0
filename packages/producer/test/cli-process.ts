import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  rmdirSync,
  statSync,
  utimesSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { requires } from '@outbox/test-harness'
import { afterAll, expect, type TestContext } from 'vitest'

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url))
/** The built CLI, as the `bin` entry runs it. */
export const CLI_PATH = fileURLToPath(new URL('../dist/cli.js', import.meta.url))

const LOCK = join(tmpdir(), `outbox-cli-build-${Buffer.from(REPO_ROOT).toString('hex').slice(-24)}.lock`)

const STAMP = `${LOCK}.built`

/** What the producer's build reads: when none of it changed since the last build, there is nothing to do. */
const BUILD_INPUTS = [
  'packages/producer/src',
  'packages/protocol/src',
  'packages/producer/tsconfig.json',
  'packages/protocol/tsconfig.json',
  'packages/producer/package.json',
  'tsconfig.base.json',
].map((path) => join(REPO_ROOT, path))

function newestMtime(path: string): number {
  const stat = statSync(path)
  if (!stat.isDirectory()) return stat.mtimeMs
  let newest = stat.mtimeMs
  for (const entry of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, entry)))
  return newest
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/**
 * Builds the producer (`tsc -b`, incremental) so the tests run the real `dist/cli.js`. Test files run in parallel
 * workers: a lock directory makes their builds take turns, so none reads a file another is writing. A stamp
 * records when the last build started: when no input is newer, even starting the compiler (seconds of CPU that
 * every test file would pay) is skipped.
 */
export function buildCli(): void {
  const started = Date.now()
  for (;;) {
    try {
      mkdirSync(LOCK)
      break
    } catch {
      // A lock left by a killed run is stale after a minute; a real build takes seconds.
      try {
        if (Date.now() - statSync(LOCK).mtimeMs > 60_000) rmdirSync(LOCK)
      } catch {}
      if (Date.now() - started > 120_000) throw new Error(`could not take the build lock ${LOCK}`)
      sleepSync(100)
    }
  }
  try {
    const fresh =
      existsSync(STAMP) &&
      existsSync(CLI_PATH) &&
      statSync(STAMP).mtimeMs >= Math.max(...BUILD_INPUTS.map(newestMtime))
    if (fresh) return
    const startedAt = new Date()
    execFileSync('npx', ['tsc', '-b', 'packages/producer'], { cwd: REPO_ROOT, stdio: 'pipe' })
    closeSync(openSync(STAMP, 'a'))
    // The start time, not the end: a file saved during the build is newer than the stamp and rebuilds next time.
    utimesSync(STAMP, startedAt, startedAt)
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: Buffer; stderr?: Buffer }
    throw new Error(`tsc -b packages/producer failed:\n${stdout ?? ''}${stderr ?? ''}`)
  } finally {
    rmdirSync(LOCK)
  }
}

/**
 * An environment for the CLI with nothing inherited but what Node needs: the test runner's own DATABASE_URL (or
 * any OUTBOX_* variable) must never leak into a test of how the CLI reads its environment.
 */
export function cliEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LANG: 'C' }
  for (const [key, value] of Object.entries(extra)) if (value !== undefined) env[key] = value
  return env
}

/** A finished CLI run. */
export interface CliResult {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** A CLI process still running; every one is killed after its test if the test did not end it. */
export interface CliProcess {
  readonly child: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  /** Output lines so far (stdout). */
  readonly lines: () => string[]
  /** Resolves when `check` passes (tried on every output); rejects on time-out or if the process exits first. */
  waitFor(check: () => boolean, what: string, timeoutMs?: number): Promise<void>
  /** Sends a signal and resolves with the finished run. */
  stop(signal: NodeJS.Signals, timeoutMs?: number): Promise<CliResult>
  readonly exited: Promise<CliResult>
  /** Types into the process's terminal (only with `terminal: true`): `'\x03'` is Ctrl-C. */
  type(text: string): void
}

/**
 * Tests that run the CLI on a terminal need util-linux `script` to give the spawned CLI one: without it they are
 * skipped with a line in the run's summary (a failure under `OUTBOX_REQUIRE_ALL=1`).
 */
export const onTerminal = requires(
  'CLI terminal tests',
  (() => {
    try {
      execFileSync('script', ['--version'], { stdio: 'ignore' })
      return { available: true, value: 'script' } as const
    } catch {
      return {
        available: false,
        missing: 'no util-linux `script` command (Debian: apt-get install bsdutils)',
      } as const
    }
  })(),
)

function shellQuote(value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`
}

const running = new Set<ChildProcess>()

// The net under the per-test cleanup below: nothing outlives its test file.
afterAll(() => {
  for (const child of running) child.kill('SIGKILL')
  running.clear()
})

/** How {@link startCli} runs the CLI. */
export interface StartCliOptions {
  /**
   * The test's own `onTestFinished` (from its context, which is right for concurrent tests too): the process is
   * killed when the test ends, whatever happened in it.
   */
  readonly onTestFinished: TestContext['onTestFinished']
  /** Run on a pseudo-terminal (through `script`): the CLI sees a TTY, and `type('\x03')` is Ctrl-C. */
  readonly terminal?: boolean
}

/** Starts `node dist/cli.js <args>` without waiting for it. */
export function startCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  options: StartCliOptions,
): CliProcess {
  const command = [process.execPath, CLI_PATH, ...args].map(shellQuote).join(' ')
  // `exec`, so the CLI itself is the terminal's foreground process, not a shell waiting on it.
  const child = options.terminal
    ? spawn('script', ['-qfec', `exec ${command}`, '/dev/null'], {
        env: { TERM: 'xterm', ...env },
        stdio: ['pipe', 'pipe', 'pipe'],
      })
    : spawn(process.execPath, [CLI_PATH, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  running.add(child)
  options.onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  let stdout = ''
  let stderr = ''
  const listeners = new Set<() => void>()
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk
    for (const listener of listeners) listener()
  })
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
    for (const listener of listeners) listener()
  })
  const exited = new Promise<CliResult>((resolve) => {
    child.once('close', (code, signal) => {
      running.delete(child)
      for (const listener of listeners) listener()
      resolve({ code, signal, stdout, stderr })
    })
  })
  const done = () => child.exitCode !== null || child.signalCode !== null
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    lines: () => stdout.split('\n').filter(Boolean),
    exited,
    type(text) {
      if (!options.terminal) throw new Error('type() needs startCli(…, { terminal: true })')
      child.stdin!.write(text)
    },
    // Generous defaults: ceilings catch what never comes; a loaded machine (a CLI's start is a process start and a
    // pool's first connections) must not reach them.
    waitFor(check, what, timeoutMs = 60_000) {
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => finish(new Error(`timed out waiting for ${what}; stdout:\n${stdout}\nstderr:\n${stderr}`)),
          timeoutMs,
        )
        const listener = () => {
          if (check()) finish()
          else if (done())
            finish(new Error(`the CLI exited before ${what}; stdout:\n${stdout}\nstderr:\n${stderr}`))
        }
        function finish(error?: Error) {
          clearTimeout(timer)
          listeners.delete(listener)
          if (error) reject(error)
          else resolve()
        }
        listeners.add(listener)
        listener()
      })
    },
    async stop(signal, timeoutMs = 60_000) {
      child.kill(signal)
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the CLI did not exit within ${timeoutMs} ms of ${signal}`)),
          timeoutMs,
        )
      })
      try {
        return await Promise.race([exited, timeout])
      } finally {
        clearTimeout(timer)
      }
    },
  }
}

/** Runs `node dist/cli.js <args>` to completion. */
export async function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 30_000,
): Promise<CliResult> {
  // A run always ends here (its exit or the time-out), so it needs no per-test cleanup.
  const cli = startCli(args, env, { onTestFinished: () => {} })
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      cli.child.kill('SIGKILL')
      reject(new Error(`outbox ${args.join(' ')} did not finish within ${timeoutMs} ms`))
    }, timeoutMs)
  })
  try {
    return await Promise.race([cli.exited, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Asserts the CLI's failure contract: the exit code, nothing on stdout, exactly one line on stderr starting
 * `outbox: `, matching `pattern`, and no stack trace.
 */
export function expectFailure(result: CliResult, exitCode: number, pattern: RegExp): string {
  const detail = `stdout:\n${result.stdout}\nstderr:\n${result.stderr}`
  expect(result.code, detail).toBe(exitCode)
  expect(result.stdout, detail).toBe('')
  const lines = result.stderr.split('\n').filter(Boolean)
  expect(lines, detail).toHaveLength(1)
  const line = lines[0]!
  expect(line).toMatch(/^outbox: /)
  expect(line).toMatch(pattern)
  expect(result.stderr).not.toMatch(/\n\s+at /)
  return line
}

/** A connection string to a port nothing listens on (connection refused). */
export const REFUSED_URL = 'postgres://postgres:s3cret-password@127.0.0.1:1/outbox'

/**
 * `url` without its password, and the password apart: what a command line may carry (a password in
 * `--database-url` is refused) and what goes in `PGPASSWORD`, which pg reads when the URL has none.
 */
export function withoutPassword(url: string): { readonly url: string; readonly password: string } {
  const parsed = new URL(url)
  const password = decodeURIComponent(parsed.password)
  parsed.password = ''
  return { url: parsed.toString(), password }
}
