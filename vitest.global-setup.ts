import { migrate as migrateConsumer } from '@outbox/consumer'
import { migrate as migrateProducer } from '@outbox/producer'
import { openKysely, type RunningPostgres, startPostgres, withDatabase } from '@outbox/test-harness'
import pg from 'pg'
import type { TestProject } from 'vitest/node'

/**
 * Starts (or borrows, with DATABASE_URL) one PostgreSQL for the whole run and builds the migrated template
 * database every test file clones. The embedded server is stopped whatever the outcome.
 */
export default async function setup(project: TestProject) {
  let server: RunningPostgres | undefined
  let adminUrl = process.env.DATABASE_URL
  if (!adminUrl) {
    const version = process.env.OUTBOX_TEST_PG === '14' ? '14' : '18'
    server = await startPostgres({ version })
    adminUrl = server.url()
  }
  const template = `outbox_template_${process.pid}_${Date.now()}`
  const admin = new pg.Client({ connectionString: adminUrl })
  try {
    await admin.connect()
    const { rows } = await admin.query<{ server_version: string }>('SHOW server_version')
    console.log(`[harness] PostgreSQL ${rows[0]?.server_version} (${server ? 'embedded' : 'DATABASE_URL'})`)
    await admin.query(`CREATE DATABASE ${template}`)
    const db = openKysely(withDatabase(adminUrl, template), { max: 2 })
    try {
      await migrateProducer(db)
      await migrateConsumer(db)
    } finally {
      await db.destroy()
    }
  } catch (error) {
    await admin.end().catch(() => {})
    await server?.stop()
    throw error
  }
  project.provide('outboxAdminUrl', adminUrl)
  project.provide('outboxTemplateDatabase', template)

  return async () => {
    try {
      await admin.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`)
      await admin.end()
    } finally {
      await server?.stop()
    }
  }
}
