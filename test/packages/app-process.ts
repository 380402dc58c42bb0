/**
 * A command from the docs, run as a terminal runs it: through `sh`, in a process group of its own, so that a Ctrl-C
 * reaches the whole group (npm, tsx and the script alike), as the terminal's does.
 */
import { type ChildProcess, spawn } from 'node:child_process'

/** How a command ended: its exit code, or the signal that ended it. */
export interface Ending {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** A command running in its own process group. */
export interface AppProcess {
  /** What the test calls it in messages (`relay.ts on Node.js 22`). */
  readonly name: string
  readonly child: ChildProcess
  /** Everything it printed so far, stdout and stderr interleaved. */
  output(): string
  /** What it printed on stderr. */
  errors(): string
  /** Resolves with its ending once the group's leader exited. */
  readonly ended: Promise<Ending>
  /** Resolves once its output matches `pattern`; rejects if it ends first or after `timeoutMs`. */
  waitForOutput(pattern: RegExp, what: string, timeoutMs?: number): Promise<RegExpMatchArray>
  /** Ctrl-C: SIGINT to every process of the group. */
  interrupt(): void
  /** Resolves once no process of its group is left (the script, not just its npm parent); rejects after `timeoutMs`. */
  groupGone(timeoutMs?: number): Promise<void>
  /** SIGKILL to the group, for clean-up: nothing of a failed test outlives it. */
  kill(): void
}

/** Options of {@link startCommand}. */
export interface StartCommandOptions {
  readonly name: string
  readonly cwd: string
  readonly env: NodeJS.ProcessEnv
}

/** Polls `check` until it is true; rejects with `what` after `timeoutMs` (a ceiling against hangs, never a verdict). */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * Starts `script` with `sh -c` in a new process group. A long-running command is best started as `exec <command>`:
 * the shell then makes way for it, as an interactive shell running it would.
 */
export function startCommand(script: string, options: StartCommandOptions): AppProcess {
  const child = spawn('sh', ['-c', script], {
    cwd: options.cwd,
    env: options.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  let errors = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk
  })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk
    errors += chunk
  })
  let hasEnded = false
  const ended = new Promise<Ending>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (code, signal) => {
      hasEnded = true
      resolve({ code, signal })
    })
  })
  const pid = child.pid
  if (pid === undefined) throw new Error(`${options.name}: sh did not start`)
  const described = () => `${options.name} printed:\n${output || '(nothing)'}`
  return {
    name: options.name,
    child,
    output: () => output,
    errors: () => errors,
    ended,
    async waitForOutput(pattern, what, timeoutMs = 60_000) {
      let match: RegExpMatchArray | null = null
      try {
        await waitUntil(
          () => {
            match = pattern.exec(output)
            if (match === null && hasEnded) throw new Error(`${options.name} ended before ${what}`)
            return match !== null
          },
          `${options.name}: ${what}`,
          timeoutMs,
        )
      } catch (error) {
        throw new Error(`${(error as Error).message}\n${described()}`, { cause: error })
      }
      return match!
    },
    interrupt() {
      process.kill(-pid, 'SIGINT')
    },
    async groupGone(timeoutMs = 60_000) {
      try {
        await waitUntil(() => !groupAlive(pid), `every process of ${options.name} to exit`, timeoutMs)
      } catch (error) {
        throw new Error(`${(error as Error).message}\n${described()}`, { cause: error })
      }
    },
    kill() {
      if (groupAlive(pid)) process.kill(-pid, 'SIGKILL')
    },
  }
}

/** Runs `script` with `sh -e -c` to its end; rejects with its output unless it exits 0. */
export async function runCommand(
  script: string,
  options: StartCommandOptions & { readonly timeoutMs?: number },
): Promise<{ output: string; errors: string }> {
  const started = startCommand(`set -e\n${script}`, options)
  const timer = setTimeout(() => started.kill(), options.timeoutMs ?? 300_000)
  try {
    const ending = await started.ended
    if (ending.code !== 0) {
      throw new Error(
        `${options.name} ended with ${ending.signal ?? `exit code ${ending.code}`}:\n${script}\n--- it printed:\n${started.output()}`,
      )
    }
    return { output: started.output(), errors: started.errors() }
  } finally {
    clearTimeout(timer)
    started.kill()
  }
}
