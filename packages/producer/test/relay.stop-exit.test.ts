import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { describe, expect, it } from 'vitest'

const t = useTestDatabase()

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
const script = fileURLToPath(new URL('./fixtures/relay-stop-exit.ts', import.meta.url))

describe('relay stop', () => {
  it('leaves nothing behind: a process whose only work was a relay has no timer left after stop() and exits by itself with code 0', {
    timeout: 120_000,
  }, async () => {
    const sink = await startSink(() => ({ status: 200, body: { status: 'applied' } }))
    try {
      const child = spawn(
        process.execPath,
        [
          '--conditions=@outbox/source',
          '--import',
          tsx,
          script,
          JSON.stringify({ url: t.url, endpoint: sink.url, pollIntervalMs: 50 }),
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      )
      let output = ''
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString()
      })
      // No deadline here but the test's own: the verdict is what the child reports and how it ends, not how fast.
      const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null]
      const report = JSON.parse(output.trim().split('\n').at(-1) ?? '{}') as { left?: string[] }
      // A timer left by stop() keeps a process alive until it fires (the stop path's sleeps ran 12 s past stop()).
      expect(report.left?.filter((resource) => resource === 'Timeout')).toEqual([])
      expect({ code, signal }).toEqual({ code: 0, signal: null })
    } finally {
      await sink.close()
    }
  })
})
