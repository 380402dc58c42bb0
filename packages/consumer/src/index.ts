export type { ExpressMiddleware } from './adapters/express.js'
export { type AdapterOptions, type Consumer, createConsumer } from './consumer.js'
export type {
  EnvelopeReader,
  EnvelopeRefusal,
  EnvelopeResult,
} from './core/envelope-reader.js'
export { type HeaderInput, type WebhookHeaders, webhookHeaders } from './core/headers.js'
export type { BodySource } from './core/read-body.js'
export type { WebhookRequest } from './core/receive.js'
export {
  type StandardWebhooksVerifierOptions,
  standardWebhooksVerifier,
  type VerifyFailure,
  type VerifyFunction,
  type WebhookVerifier,
} from './core/verifier.js'
export { OutboxError, type OutboxErrorCode } from './errors.js'
export {
  createPool,
  type GuardablePool,
  guardedPoolCount,
  guardPool,
  isGuardedPool,
} from './guard-pool.js'
export type {
  DedupeHandler,
  EnvelopeKind,
  ExpressRequest,
  HandlerEvent,
  ReceiptHandler,
} from './handler.js'
export { consoleLogger, DEFAULT_LOGGER, type Logger, type LogMethod, silentLogger } from './logger.js'
export {
  type ConsumerMetrics,
  type ConsumerMetricsOptions,
  consumerMetrics,
  RECEIPT_DURATION_BUCKETS,
} from './metrics.js'
export {
  type ConsumerOptions,
  DEFAULT_BODY_TIMEOUT_MS,
  DEFAULT_LARGE_BODY_BYTES_PER_SECOND,
  DEFAULT_LOG_INTERVAL_MS,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_CONCURRENT_BODIES,
  DEFAULT_SEQUENCE_POLICY,
  DEFAULT_SOURCE,
  type ErrorListener,
  type FirstSequence,
  type ResolvedConsumerOptions,
  type SequencePolicy,
} from './options.js'
export {
  MAX_REPORTED_ISSUES,
  type PayloadSchemas,
} from './payload-schemas.js'
export {
  DEFAULT_PROCESSED_PRUNE_BATCH_SIZE,
  DEFAULT_PROCESSED_PRUNE_MAX_BATCHES,
  DEFAULT_PRUNE_BATCH_SIZE,
  DEFAULT_PRUNE_MAX_BATCHES,
  type PruneProcessedOptions,
  type PruneProcessedResult,
  pruneProcessed,
} from './prune-processed.js'
export type { ReceiptEventMap, ReceiptListener, ReceiptRef } from './receipt-events.js'
export type { Refusal, WebhookResponse } from './respond.js'
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
export { githubEnvelope } from './senders/github-envelope.js'
export { githubVerifier } from './senders/github-verifier.js'
export { standardWebhooksEnvelope } from './senders/standard-webhooks-envelope.js'
export { stripeEnvelope } from './senders/stripe-envelope.js'
export { type StripeVerifierOptions, stripeVerifier } from './senders/stripe-verifier.js'
export { type SvixVerifierOptions, svixVerifier } from './senders/svix-verifier.js'
