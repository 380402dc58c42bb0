import { useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { createConsumer, createPool, guardedPoolCount } from '../src/index.js'
import { recordingLogger } from './support.js'

const t = useTestDatabase()
const opened: Kysely<any>[] = []
afterAll(async () => {
  for (const db of opened) await db.destroy()
})

const unguardedWarnings = (logger: ReturnType<typeof recordingLogger>) =>
  logger.lines.filter((line) => line.level === 'warn' && line.msg.includes('not guarded'))

// In this order, in a file of its own: the first test needs a process that has guarded no pool yet.
describe('createConsumer and the pool behind db', () => {
  it('warns when a PostgreSQL db is given and the process has guarded no pool: its pool cannot be guarded', () => {
    expect(guardedPoolCount()).toBe(0)
    const db = new Kysely<any>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: t.url }) }),
    })
    opened.push(db)
    const logger = recordingLogger()
    createConsumer({ db, secret: `whsec_${Buffer.alloc(24, 1).toString('base64')}`, logger })
    expect(unguardedWarnings(logger)).toHaveLength(1)
    expect(unguardedWarnings(logger)[0]?.msg).toMatch(/createPool/)
  })

  it('says nothing once the pool is created with createPool', () => {
    const db = new Kysely<any>({
      dialect: new PostgresDialect({ pool: createPool({ connectionString: t.url }) }),
    })
    opened.push(db)
    expect(guardedPoolCount()).toBe(1)
    const logger = recordingLogger()
    createConsumer({ db, secret: `whsec_${Buffer.alloc(24, 1).toString('base64')}`, logger })
    expect(unguardedWarnings(logger)).toEqual([])
  })
})
