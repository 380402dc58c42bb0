/** The operations snippets of the root README.md: type-checked in CI, never run. */
import type { Kysely } from 'kysely'

declare const db: Kysely<any> // the producer's database, where the outbox is
declare const producerDb: Kysely<any>
declare const consumerDb: Kysely<any> // the subscriber's database

// #region dead-letters
import { listDeadLetters, redrive } from '@outbox/producer'

const dead = await listDeadLetters(db, { limit: 50 }) // oldest first: eventId, lastStatus, lastError, …
await redrive(db, { eventIds: dead.map((letter) => letter.eventId) }) // or { all: true }

// #endregion dead-letters

// #region prune
import { pruneProcessed } from '@outbox/consumer'
import { prune } from '@outbox/producer'

await prune(producerDb, { retention: '7d', deadLetterRetention: '30d' }) // sent events; dead letters if asked
await pruneProcessed(consumerDb, { retention: '40d' }) // processed event ids
// #endregion prune
