/** The pruning snippet of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-prune
import { createPool, pruneProcessed } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const { removed, caughtUp } = await pruneProcessed(db, { retention: '40d', batchSize: 1000, maxBatches: 100 })
console.log(`pruned ${removed} ids`, caughtUp ? '' : '(more to do: run again)')
// #endregion consumer-prune
