/** The schema snippet of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-schema
import { createPool, migrate } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
await migrate(db) // or migrate(db, { schema: 'webhooks' })
// #endregion consumer-schema
