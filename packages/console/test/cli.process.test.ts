import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { useTestDatabase } from '@outbox/test-harness'
import { describe, expect, it } from 'vitest'

const t = useTestDatabase()
const CLI = fileURLToPath(new URL('../src/cli.ts', import.meta.url))
const TOKEN = 'bin-test-token-0123456789abcdef'

/** Starts the bin from source (as its built `dist/cli.js` runs), on a free port. */
function startBin(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=@outbox/source', CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => {
    stdout += chunk
  })
  child.stderr.on('data', (chunk) => {
    stderr += chunk
  })
  const listening = new Promise<string>((resolve, reject) => {
    child.stdout.on('data', () => {
      const url = /listening on (http:\S+)/.exec(stdout)?.[1]
      if (url) resolve(url)
    })
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)))
  })
  // Awaited only by the tests that expect it to listen; the others watch the exit.
  listening.catch(() => {})
  return { child, listening, output: () => ({ stdout, stderr }) }
}

describe('outbox-console', () => {
  it('serves the console on the URL it prints, behind the token, and exits 0 on SIGTERM', async () => {
    const bin = startBin(['--port', '0', '--refresh', '2s'], {
      OUTBOX_CONSOLE_TOKEN: TOKEN,
      OUTBOX_CONSOLE_ACTOR: 'ops',
      DATABASE_URL: t.url,
    })
    const url = await bin.listening
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/)
    expect((await fetch(url)).status).toBe(401)
    const page = await fetch(url, { headers: { Authorization: `Bearer ${TOKEN}` } })
    expect(page.status).toBe(200)
    const text = await page.text()
    expect(text).toContain('This page refreshes every 2 s.')
    expect(text).not.toContain(t.url)
    const exited = once(bin.child, 'exit')
    bin.child.kill('SIGTERM')
    const [code] = await exited
    expect(code).toBe(0)
  })

  it('prints its help, and names the flag for a bad value (exit 2, no stack trace)', async () => {
    const help = startBin(['--help'], {})
    const [helpCode] = await once(help.child, 'exit')
    expect(helpCode).toBe(0)
    expect(help.output().stdout).toMatch(/--database-url/)
    const bad = startBin(['--refresh', 'soon'], {
      OUTBOX_CONSOLE_TOKEN: TOKEN,
      OUTBOX_CONSOLE_ACTOR: 'ops',
      DATABASE_URL: t.url,
    })
    const [badCode] = await once(bad.child, 'exit')
    expect(badCode).toBe(2)
    expect(bad.output().stderr).toMatch(/--refresh/)
    expect(bad.output().stderr).not.toMatch(/\n\s+at /)
  })

  it('says once that it needs a token: one "outbox-console:" prefix, not two', async () => {
    const bin = startBin([], { OUTBOX_CONSOLE_TOKEN: '', OUTBOX_CONSOLE_TOKEN_FILE: '', DATABASE_URL: t.url })
    const [code] = await once(bin.child, 'exit')
    expect(code).toBe(2)
    expect(bin.output().stderr).toMatch(/^outbox-console: needs a token: pass --token-file/)
    expect(bin.output().stderr.match(/outbox-console/g)).toHaveLength(1)
  })
})
