import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { type EnqueueInput, enqueueMany, migrate, type RelayOptions } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import { askChild } from './child-ipc.js'
import { withTimeout } from './timing.js'
import { type Backlog, backlogEvent } from './workload.js'

/** Creates the producer (and consumer) tables and enqueues a backlog through the public `enqueueMany`. */
export async function seedOutboxBacklog(url: string, backlog: Backlog): Promise<void> {
  const db = openKysely(url, { max: 2 })
  try {
    await migrate(db)
    const chunk = 1000
    for (let start = 0; start < backlog.events; start += chunk) {
      const events: EnqueueInput<unknown>[] = []
      for (let n = start; n < Math.min(backlog.events, start + chunk); n++) {
        const event = backlogEvent(backlog, n)
        events.push({
          aggregateType: 'order',
          aggregateId: event.aggregateId,
          eventType: event.eventType,
          payload: event.payload,
        })
      }
      await db.transaction().execute((trx) => enqueueMany(trx, events, { notify: false }))
    }
    await sql`VACUUM ANALYZE`.execute(db)
  } finally {
    await db.destroy()
  }
}

/** Installs the producer tables (the migrated template every outbox database is copied from). */
export function installOutbox(url: string): Promise<void> {
  return seedOutboxBacklog(url, { events: 0, aggregates: 1 })
}

/** Relay settings a child process accepts (everything but the database, which it opens from `url`). */
export type RelayProcessOptions = Omit<RelayOptions, 'db' | 'logger' | 'metrics' | 'listen'> & {
  readonly url: string
  /** LISTEN on the same database. */
  readonly listen?: boolean
}

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('../relay-process.ts', import.meta.url))

/** A relay in its own OS process, armed: it has connected and built its relay, and starts on {@link go}. */
export interface RelayProcess {
  /** Starts it; resolves once it runs (its LISTEN connection up, when it has one). */
  go(): Promise<void>
  /** The p99 of its event loop's delay since {@link go}, in milliseconds. */
  loopDelayP99(): Promise<number>
  /** Graceful stop (marks flushed, lanes released); kills it if it does not exit in time. */
  stop(): Promise<void>
}

/** Spawns a relay process and waits until it is armed. */
export async function spawnRelayProcess(options: RelayProcessOptions): Promise<RelayProcess> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--conditions=@outbox/source', '--import', tsx, script, JSON.stringify(options)],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  )
  const exited = once(child, 'exit')
  try {
    await withTimeout(
      new Promise<void>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`relay process exited early with ${code}`)))
        child.on('message', (message) => {
          if (message === 'armed') resolve()
        })
      }),
      30_000,
      'a relay process to start',
    )
  } catch (error) {
    child.kill('SIGKILL')
    throw error
  }
  return {
    async go() {
      await askChild(
        child,
        'go',
        (answer) => (answer === 'started' ? true : undefined),
        'a relay process to start',
        30_000,
      )
    },
    loopDelayP99() {
      return askChild(
        child,
        'loop',
        (answer: { loopDelayP99?: number }) => answer?.loopDelayP99,
        'a relay process to report its event loop',
      )
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.send('stop')
      try {
        await withTimeout(exited, 15_000, 'a relay process to stop')
      } catch {
        child.kill('SIGKILL')
        await exited
      }
    },
  }
}
