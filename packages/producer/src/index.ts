export {
  type DeadLetter,
  type ListDeadLettersOptions,
  listDeadLetters,
  type RedriveOptions,
  type RedriveResult,
  redrive,
} from './dead-letters.js'
export { type Duration, parseDuration } from './duration.js'
export { type EnqueuedEvent, type EnqueueOptions, enqueue, enqueueMany } from './enqueue.js'
export { OutboxError, type OutboxErrorCode } from './errors.js'
export { DEFAULT_MAX_PAYLOAD_BYTES, type EnqueueInput } from './event-input.js'
export {
  DEFAULT_PRUNE_BATCH_SIZE,
  DEFAULT_PRUNE_MAX_BATCHES,
  type PruneOptions,
  type PruneResult,
  prune,
} from './prune.js'
export {
  type BlockedReason,
  type EventStatus,
  type MigrateOptions,
  migrate,
  type OutboxCounterTable,
  type OutboxLaneTable,
  type OutboxTable,
  PRODUCER_MIGRATION_TABLE,
  type ProducerDatabase,
  producerMigrationSql,
} from './schema.js'
export { DEFAULT_SCHEMA, notifyChannel } from './schema-name.js'
export { type OutboxStats, STRUGGLING_ATTEMPTS, stats } from './stats.js'
