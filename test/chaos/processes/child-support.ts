import { createInterface } from 'node:readline'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

/** Reads the JSON config the orchestrator passes in `argv[2]`. */
export function readConfig<T>(): T {
  const text = process.argv[2]
  if (!text) throw new Error('expected the JSON config as the first argument')
  return JSON.parse(text) as T
}

/**
 * A Kysely instance on its own pool. Both error handlers are needed: idle clients report a lost server on the
 * pool, checked-out ones on themselves, and either one unheard is an unhandled 'error' that kills the process on
 * the first PostgreSQL restart.
 */
export function openDatabase(url: string, max: number): Kysely<any> {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 })
  pool.on('error', () => {})
  pool.on('connect', (client) => client.on('error', () => {}))
  return new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
}

/** Writes one protocol line for the orchestrator. */
export function send(message: { loaded?: boolean; ready?: boolean; stats?: Record<string, number> }): void {
  process.stdout.write(`${JSON.stringify(message)}\n`)
}

const commandListeners: ((command: string) => void)[] = []

/** Calls `listener` with every line the orchestrator sends after `start` (e.g. `release`). */
export function onCommand(listener: (command: string) => void): void {
  commandListeners.push(listener)
}

/**
 * Waits for the orchestrator's go. A process is spawned as soon as its predecessor is killed, loads its modules
 * (seconds of CPU on a busy machine) and waits here; the orchestrator says `start` when the planned downtime is
 * over, so the downtime is the plan's, not the module loader's. Also exits when the orchestrator's end of stdin
 * closes: an orchestrator that died without cleaning up must not leave its children running.
 */
export function waitForStart(): Promise<void> {
  const exit = () => process.exit(70)
  process.stdin.on('end', exit)
  process.stdin.on('close', exit)
  process.stdin.on('error', exit)
  send({ loaded: true })
  return new Promise((resolve) => {
    createInterface({ input: process.stdin }).on('line', (line) => {
      if (line === 'start') resolve()
      else for (const listener of commandListeners) listener(line)
    })
  })
}

/** A pino-style logger for the relay: warnings and errors (everything when `verbose`) as JSON lines on stderr, i.e. the run's log file. */
export function stderrLogger(name: string, verbose = false) {
  const write = (level: string) => (fields: Record<string, unknown>, message: string) => {
    const { err, ...rest } = fields
    const error = err instanceof Error ? err.message : err === undefined ? undefined : String(err)
    process.stderr.write(
      `${JSON.stringify({ at: new Date().toISOString(), name, level, message, ...rest, ...(error ? { error } : {}) })}\n`,
    )
  }
  return {
    debug: verbose ? write('debug') : () => {},
    info: verbose ? write('info') : () => {},
    warn: write('warn'),
    error: write('error'),
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
