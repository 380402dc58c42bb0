import { randomBytes } from 'node:crypto'
import { openKysely, useTestDatabase, withDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { PRODUCER_MIGRATION_TABLE, stats } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli, withoutPassword } from './cli-process.js'

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: inject('outboxAdminUrl') })
  await client.connect()
  try {
    await client.query(statement)
  } finally {
    await client.end()
  }
}

async function tablesIn(url: string, schema: string): Promise<string[]> {
  const db = openKysely(url, { max: 1 })
  try {
    const { rows } = await sql<{ table_name: string }>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY table_name`.execute(
      db,
    )
    return rows.map((row) => row.table_name)
  } finally {
    await db.destroy()
  }
}

const PRODUCER_TABLES = [
  'outbox',
  'outbox_audit',
  'outbox_counter',
  'outbox_delivery_attempt',
  'outbox_lane',
  'outbox_subscription',
  'outbox_subscription_secret',
  PRODUCER_MIGRATION_TABLE,
  `${PRODUCER_MIGRATION_TABLE}_lock`,
].sort()

describe.concurrent('outbox migrate', () => {
  const fresh = `outbox_cli_fresh_${randomBytes(4).toString('hex')}`
  afterAll(() => admin(`DROP DATABASE IF EXISTS ${fresh} WITH (FORCE)`))

  it('creates the producer tables in a fresh database, and is idempotent', async () => {
    await admin(`CREATE DATABASE ${fresh}`)
    const url = withDatabase(t.url, fresh)
    expect(await tablesIn(url, 'public')).toEqual([])
    const first = await runCli(['migrate'], cliEnv({ DATABASE_URL: url }))
    expect(first, first.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(first.stdout).toBe(`producer tables in schema "public" of ${fresh} are up to date\n`)
    expect(await tablesIn(url, 'public')).toEqual(PRODUCER_TABLES)
    // The URL on the command line without its password (which is refused there), the password in PGPASSWORD.
    const typed = withoutPassword(url)
    const again = await runCli(
      ['migrate', '--database-url', typed.url],
      cliEnv({ PGPASSWORD: typed.password }),
    )
    expect(again).toMatchObject({ code: 0, stdout: first.stdout, stderr: '' })
  })

  it('creates a fresh schema from --schema or OUTBOX_SCHEMA, usable by the other commands', async () => {
    const [flag, env] = await Promise.all([
      runCli(['migrate', '--schema', 'cli_flag_schema'], cliEnv({ DATABASE_URL: t.url })),
      runCli(['migrate'], cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: 'cli_env_schema' })),
    ])
    expect(flag, flag.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(flag.stdout).toContain('schema "cli_flag_schema"')
    expect(env, env.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(env.stdout).toContain('schema "cli_env_schema"')
    expect(await tablesIn(t.url, 'cli_flag_schema')).toEqual(PRODUCER_TABLES)
    expect(await tablesIn(t.url, 'cli_env_schema')).toEqual(PRODUCER_TABLES)
    expect(await stats(t.db, { schema: 'cli_env_schema' })).toMatchObject({ pending: 0, dead: 0 })
    const read = await runCli(
      ['stats', '--json', '--schema', 'cli_flag_schema'],
      cliEnv({ DATABASE_URL: t.url }),
    )
    expect(read.code, read.stderr).toBe(0)
  })

  it('rejects a bad schema name, an extra argument and an unknown flag with exit 2', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const [schema, extra, flag] = await Promise.all([
      runCli(['migrate', '--schema', 'Outbox'], env),
      runCli(['migrate', 'now'], env),
      runCli(['migrate', '--dry-run'], env),
    ])
    expectFailure(schema, 2, /--schema must be a lower-case SQL identifier/)
    expectFailure(extra, 2, /unexpected argument "now" \(see outbox migrate --help\)/)
    expectFailure(flag, 2, /unknown option --dry-run/)
    expect(await tablesIn(t.url, 'Outbox')).toEqual([])
  })

  it('fails with exit 1 and the reason when the database refuses the migration', async () => {
    const role = `outbox_cli_reader_${randomBytes(3).toString('hex')}`
    await admin(`CREATE ROLE ${role} LOGIN PASSWORD 'reader-pw'`)
    try {
      const url = new URL(t.url)
      url.username = role
      url.password = 'reader-pw'
      const result = await runCli(
        ['migrate', '--schema', 'cli_denied'],
        cliEnv({ DATABASE_URL: url.toString() }),
      )
      const line = expectFailure(
        result,
        1,
        /^outbox: permission denied on .*: permission denied for database/,
      )
      expect(line).not.toContain('reader-pw')
    } finally {
      await admin(`DROP ROLE IF EXISTS ${role}`)
    }
  })
})
