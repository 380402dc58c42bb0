import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { askChild } from './child-ipc.js'
import type { OrderReport } from './order-tracker.js'
import { withTimeout } from './timing.js'

/** What a sink process is started with (see {@link spawnSinkProcess}). */
export interface SinkProcessOptions {
  /** Distinct events the run expects. */
  readonly expected: number
  /** Milliseconds before answering. */
  readonly delayMs: number
}

/** A tracked sink in its own OS process (see `../sink-process.ts`), listening. */
export interface SinkProcess {
  readonly url: string
  /** Its order report so far (events received, duplicates, order violations), read over IPC. */
  report(): Promise<OrderReport>
  /** Closes it; kills it if it does not exit in time. */
  stop(): Promise<void>
}

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('../sink-process.ts', import.meta.url))

/** Starts a tracked sink in a process of its own and waits until it listens. */
export async function spawnSinkProcess(options: SinkProcessOptions): Promise<SinkProcess> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--conditions=@outbox/source', '--import', tsx, script, JSON.stringify(options)],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  )
  const exited = once(child, 'exit')
  let url: string
  try {
    url = await withTimeout(
      new Promise<string>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`sink process exited early with ${code}`)))
        child.on('message', (message: { url?: string }) => {
          if (message.url) resolve(message.url)
        })
      }),
      30_000,
      'a sink process to listen',
    )
  } catch (error) {
    child.kill('SIGKILL')
    throw error
  }
  return {
    url,
    report() {
      return askChild(
        child,
        'report',
        (answer: { report?: OrderReport }) => answer?.report,
        'a sink process to report',
      )
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.send('stop')
      try {
        await withTimeout(exited, 15_000, 'a sink process to stop')
      } catch {
        child.kill('SIGKILL')
        await exited
      }
    },
  }
}
