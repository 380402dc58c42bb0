/** The schema snippet of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-schema
import { migrate } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
await migrate(db) // or migrate(db, { schema: 'webhooks' })
// #endregion consumer-schema
