import { type ChildProcess, spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Badness } from './bad-endpoints.js'
import { askChild } from './child-ipc.js'
import { withTimeout } from './timing.js'

/** Misbehaving endpoints in a process of their own (see `../bad-endpoints-process.ts`), listening. */
export interface BadEndpointsProcess {
  readonly urls: readonly string[]
  /** Closes them and says what they received and wrote; kills the process if it does not answer in time. */
  stop(): Promise<{ requests: number; bytesSent: number }>
}

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('../bad-endpoints-process.ts', import.meta.url))

/** Starts `count` endpoints behaving as `badness` says, in a process of their own, and waits until they listen. */
export async function spawnBadEndpoints(count: number, badness: Badness): Promise<BadEndpointsProcess> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--conditions=@outbox/source', '--import', tsx, script, JSON.stringify({ count, badness })],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  )
  let urls: readonly string[]
  try {
    urls = await withTimeout(
      new Promise<readonly string[]>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`bad endpoints' process exited early with ${code}`)))
        child.on('message', (message: { urls?: string[] }) => {
          if (message.urls) resolve(message.urls)
        })
      }),
      30_000,
      "the bad endpoints' process to listen",
    )
  } catch (error) {
    child.kill('SIGKILL')
    throw error
  }
  return {
    urls,
    async stop() {
      try {
        return await askChild(
          child,
          'stop',
          (answer: { requests?: number; bytesSent?: number }) =>
            answer?.requests === undefined
              ? undefined
              : { requests: answer.requests, bytesSent: answer.bytesSent ?? 0 },
          "the bad endpoints' process to stop",
          15_000,
        )
      } catch (error) {
        child.kill('SIGKILL')
        throw error
      }
    },
  }
}
