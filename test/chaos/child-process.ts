import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, openSync } from 'node:fs'
import { createRequire } from 'node:module'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'

// One process, not tsx's CLI wrapper: a SIGKILL must hit the script itself, not a parent that leaves it running.
const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const preload = new URL('./processes/preload-dependencies.mjs', import.meta.url).href

/** A line a chaos child writes on stdout: `loaded` once its modules are in, `ready` once started, `stats` now and then. */
export interface ChildMessage {
  readonly loaded?: boolean
  readonly ready?: boolean
  readonly stats?: Record<string, number>
}

/** A TypeScript script running as its own OS process. */
export interface ChildHandle {
  readonly name: string
  readonly child: ChildProcess
  readonly pid: number
  /**
   * Tells the child to start (it loads its modules first and waits for this); resolves at its `ready` line and
   * rejects if it exits first or is not ready within `timeoutMs`.
   */
  start(timeoutMs?: number): Promise<void>
  /** Sends the child one command line (after its start). */
  command(line: string): void
  /** The latest cumulative counters the child reported (what a SIGKILL cut off is lost: figures, not evidence). */
  readonly stats: Record<string, number>
  /** True once the child has loaded its modules and waits for (or got) its start. */
  readonly loaded: boolean
  readonly exited: boolean
  /** SIGKILL: no stop, no flush, no release. Resolves when the process is gone. */
  kill(): Promise<void>
  /** SIGTERM, then SIGKILL after `graceMs`. Resolves when the process is gone. */
  terminate(graceMs?: number): Promise<void>
}

/** Every child this process spawned and has not seen exit: killed by {@link killAllChildren} on any way out. */
const live = new Set<ChildProcess>()

/** Options of {@link spawnScript}. */
export interface SpawnScriptOptions {
  /** A name for messages (`relay-2`). */
  readonly name: string
  /** The script, relative to this directory's `processes/` folder. */
  readonly script: string
  /** Handed to the script as JSON in `argv[2]`. */
  readonly config: unknown
  /** Where the child's stderr goes (appended). */
  readonly logFile: string
}

/**
 * Spawns `processes/<script>` with the packages' sources (`@outbox/source`) under tsx's loader. The child loads its
 * modules and waits for {@link ChildHandle.start}. Its stdin is a pipe the child watches: if this process dies
 * without cleaning up, the children see the pipe close and exit, so no chaos process outlives its orchestrator.
 */
export function spawnScript(options: SpawnScriptOptions): ChildHandle {
  const script = fileURLToPath(new URL(`./processes/${options.script}`, import.meta.url))
  const stderr = openSync(options.logFile, 'a')
  let child: ChildProcess
  try {
    child = spawn(
      process.execPath,
      [
        '--conditions=@outbox/source',
        '--import',
        preload,
        '--import',
        tsxLoader,
        script,
        JSON.stringify(options.config),
      ],
      { stdio: ['pipe', 'pipe', stderr] },
    )
  } finally {
    closeSync(stderr)
  }
  if (child.pid === undefined) throw new Error(`could not spawn ${options.name}`)
  live.add(child)
  const stats: Record<string, number> = {}
  let loaded = false
  let markReady: () => void = () => {}
  let failReady: (error: Error) => void = () => {}
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve
    failReady = reject
  })
  // A rejection nobody awaits (the child was killed before it started) must not crash the orchestrator.
  ready.catch(() => {})
  const exit = once(child, 'exit').then(() => {
    live.delete(child)
    failReady(new Error(`${options.name} exited before it was ready (see ${options.logFile})`))
  })
  child.stdin!.on('error', () => {})
  createInterface({ input: child.stdout! }).on('line', (line) => {
    let message: ChildMessage
    try {
      message = JSON.parse(line) as ChildMessage
    } catch {
      return
    }
    if (message.loaded) loaded = true
    if (message.ready) markReady()
    if (message.stats) Object.assign(stats, message.stats)
  })
  const gone = () => child.exitCode !== null || child.signalCode !== null
  return {
    name: options.name,
    child,
    pid: child.pid,
    async start(timeoutMs = 90_000) {
      child.stdin!.write('start\n')
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(`${options.name} was not ready ${timeoutMs} ms after start (see ${options.logFile})`),
            ),
          timeoutMs,
        )
      })
      try {
        await Promise.race([ready, late])
      } finally {
        clearTimeout(timer)
      }
    },
    command(line) {
      if (!gone()) child.stdin!.write(`${line}\n`)
    },
    stats,
    get loaded() {
      return loaded
    },
    get exited() {
      return gone()
    },
    async kill() {
      if (!gone()) child.kill('SIGKILL')
      await exit
    },
    async terminate(graceMs = 5000) {
      if (!gone()) child.kill('SIGTERM')
      const timeout = setTimeout(() => {
        if (!gone()) child.kill('SIGKILL')
      }, graceMs)
      await exit
      clearTimeout(timeout)
    },
  }
}

/** SIGKILLs every child {@link spawnScript} started that is still running (by PID, only ours). */
export function killAllChildren(): void {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
}

/** The number of children still running. */
export function liveChildren(): number {
  return live.size
}
