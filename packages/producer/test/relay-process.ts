import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { RelayOptions } from '../src/index.js'

// One process, not tsx's CLI wrapper: SIGKILL must hit the relay itself, not a parent that leaves it running.
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('./fixtures/relay-process.ts', import.meta.url))

/** A relay running in a child process; `kill()` is SIGKILL — no stop, no flush, no release. */
export interface RelayProcess {
  readonly child: ChildProcess
  kill(): Promise<void>
}

/** Spawns a relay process and waits until it has started. */
export async function spawnRelay(url: string, options: Omit<RelayOptions, 'db'>): Promise<RelayProcess> {
  const child = spawn(
    process.execPath,
    ['--conditions=@outbox/source', '--import', tsx, script, JSON.stringify({ ...options, url })],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  )
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`relay process exited early with ${code}`)))
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) resolve()
    })
  })
  return {
    child,
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = once(child, 'exit')
      child.kill('SIGKILL')
      await exited
    },
  }
}
