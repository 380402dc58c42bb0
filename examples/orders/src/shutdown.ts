import { realpathSync } from 'node:fs'
import { constants } from 'node:os'
import { fileURLToPath } from 'node:url'

/** True when the module at `moduleUrl` is the script Node was started with (not imported by another one). */
export function isMain(moduleUrl: string): boolean {
  const script = process.argv[1]
  if (script === undefined) return false
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(moduleUrl))
  } catch {
    return false
  }
}

/** The shell's convention for "ended by signal N". */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 1)
}

/**
 * Runs `stop` once, at the first SIGINT or SIGTERM, and lets the process end by itself afterwards (exit code
 * 0, or 1 if stopping failed). A stop that takes longer than `timeoutMs` exits with 1, so a deploy never
 * waits forever. Another signal more than a second later means the operator will not wait: exit at once. (One
 * Ctrl-C can arrive twice — from the terminal and relayed by a launcher such as tsx or pnpm — hence the
 * second of grace.)
 */
export function stopOnSignal(name: string, stop: () => Promise<void>, timeoutMs = 15_000): void {
  let first: number | undefined
  const handler = (signal: NodeJS.Signals) => {
    if (first !== undefined) {
      if (performance.now() - first > 1_000) {
        console.error(`${name}: ${signal} again, exiting without waiting`)
        process.exit(signalExitCode(signal))
      }
      return
    }
    first = performance.now()
    console.log(`${name}: ${signal}, stopping…`)
    const deadline = setTimeout(() => {
      console.error(`${name}: still stopping after ${timeoutMs} ms, exiting`)
      process.exit(1)
    }, timeoutMs)
    deadline.unref()
    stop().then(
      () => {
        clearTimeout(deadline)
        console.log(`${name}: stopped`)
      },
      (error: unknown) => {
        clearTimeout(deadline)
        console.error(`${name}: stopping failed`, error)
        process.exitCode = 1
      },
    )
  }
  process.on('SIGINT', handler)
  process.on('SIGTERM', handler)
}
