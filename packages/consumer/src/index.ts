export type { DedupeHandler } from './apply-event.js'
export { type Consumer, createConsumer } from './dedupe.js'
export { OutboxError, type OutboxErrorCode } from './errors.js'
export { consoleLogger, DEFAULT_LOGGER, type Logger, type LogMethod, silentLogger } from './logger.js'
export {
  type ConsumerOptions,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_SEQUENCE_POLICY,
  DEFAULT_SOURCE,
  type FirstSequence,
  type ResolvedConsumerOptions,
  type SequencePolicy,
} from './options.js'
export {
  DEFAULT_PROCESSED_PRUNE_BATCH_SIZE,
  DEFAULT_PROCESSED_PRUNE_MAX_BATCHES,
  DEFAULT_PRUNE_BATCH_SIZE,
  DEFAULT_PRUNE_MAX_BATCHES,
  type PruneProcessedOptions,
  type PruneProcessedResult,
  pruneProcessed,
} from './prune-processed.js'
export type { Refusal } from './respond.js'
export {
  CONSUMER_MIGRATION_LOCK_TABLE,
  CONSUMER_MIGRATION_TABLE,
  type ConsumerCursorsTable,
  type ConsumerDatabase,
  consumerMigrationSql,
  type MigrateOptions,
  migrate,
  migrationSql,
  type ProcessedEventsTable,
} from './schema.js'
