import { randomBytes } from 'node:crypto'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, inject } from 'vitest'

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser connection string to the `postgres` database of the test server. */
    outboxAdminUrl: string
    /** A migrated database (producer and consumer tables) that each test file clones. */
    outboxTemplateDatabase: string
  }
}

/** Replaces the database name in a connection string. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}

/** Opens a Kysely instance on its own pool; whoever opens it destroys it. */
export function openKysely(url: string, options: { max?: number } = {}): Kysely<any> {
  const pool = new pg.Pool({ connectionString: url, max: options.max ?? 10 })
  // A client whose server went away (a dropped database, a restart) must not crash the test process: idle clients
  // report on the pool, checked-out ones on themselves (pg-pool removes its listener while a client is lent out).
  pool.on('error', () => {})
  pool.on('connect', (client) => client.on('error', () => {}))
  return new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
}

/** A database of one test file, cloned from the migrated template. */
export interface TestDatabase {
  /** Connection string of this file's database. */
  readonly url: string
  /** A shared Kysely instance (pool of 10). */
  readonly db: Kysely<any>
  /** Another Kysely instance on its own pool (a second "process"), destroyed after the file. */
  connect(options?: { max?: number }): Kysely<any>
}

async function runAdmin(adminUrl: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl })
  await client.connect()
  try {
    await client.query(statement)
  } finally {
    await client.end()
  }
}

/**
 * Gives the calling test file its own database, cloned from the migrated template before its tests run and
 * dropped after them. Call once at the top level of a test file.
 */
export function useTestDatabase(): TestDatabase {
  const adminUrl = inject('outboxAdminUrl')
  const template = inject('outboxTemplateDatabase')
  const name = `outbox_test_${randomBytes(6).toString('hex')}`
  const url = withDatabase(adminUrl, name)
  const opened: Kysely<any>[] = []
  let shared: Kysely<any> | undefined

  beforeAll(async () => {
    await runAdmin(adminUrl, `CREATE DATABASE ${name} TEMPLATE ${template}`)
  })
  afterAll(async () => {
    await Promise.allSettled(opened.map((db) => db.destroy()))
    await runAdmin(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  })

  const connect = (options?: { max?: number }) => {
    const db = openKysely(url, options)
    opened.push(db)
    return db
  }
  return {
    url,
    get db() {
      shared ??= connect()
      return shared
    },
    connect,
  }
}
