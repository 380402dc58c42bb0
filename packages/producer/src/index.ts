export { type AuditAction, type AuditEntry, type ListAuditOptions, listAudit } from './audit.js'
export { AUTO_DISABLE_REASONS, type AutoDisableReason, isAutoDisableReason } from './auto-disable.js'
export type { DeadLetterFilter } from './dead-letter-filter.js'
export {
  type DeadLetter,
  type DeadLetterDetail,
  type GetDeadLetterOptions,
  getDeadLetter,
  type ListDeadLettersOptions,
  listDeadLetters,
  type RedrivenDelivery,
  type RedriveOptions,
  type RedriveResult,
  redrive,
} from './dead-letters.js'
export {
  type DeliveryAttempt,
  type ListDeliveryAttemptsOptions,
  listDeliveryAttempts,
} from './delivery-attempts.js'
export {
  type DiscardOptions,
  type DiscardResult,
  discardDeadLetters,
  type UnblockedLane,
} from './discard-dead-letters.js'
export { dropTimedOutConnections } from './drop-timed-out-connections.js'
export { type Duration, parseDuration } from './duration.js'
export { type EnqueuedEvent, type EnqueueOptions, enqueue, enqueueMany } from './enqueue.js'
export { OutboxError, type OutboxErrorCode } from './errors.js'
export { DEFAULT_MAX_PAYLOAD_BYTES, type EnqueueInput, type EnqueueInputOf } from './event-input.js'
export type { EventRef, RelayEventMap, RelayListener } from './events.js'
export {
  type CheckIntegrityOptions,
  checkIntegrity,
  DEFAULT_OVERDUE_AFTER_MS,
  type IntegrityFinding,
  type IntegrityReport,
  type IntegrityViolation,
  type IntegrityViolationKind,
  type LaneRepairResult,
  type RepairIntegrityOptions,
  type RepairReport,
  repairIntegrity,
} from './integrity.js'
export {
  type LaneActionOptions,
  type LaneHead,
  type LaneState,
  type LaneSummary,
  type ListLanesOptions,
  listLanes,
  type SkipLaneHeadOptions,
  type SkipLaneHeadResult,
  skipLaneHead,
  type UnblockLaneResult,
  unblockLane,
} from './lanes.js'
export {
  LISTEN_CONNECT_TIMEOUT_MS,
  LISTEN_HEARTBEAT_INTERVAL_MS,
  LISTEN_HEARTBEAT_TIMEOUT_MS,
  LISTEN_MAX_BACKOFF_MS,
  LISTEN_MIN_BACKOFF_MS,
  type ListenHeartbeat,
  type ListenOption,
} from './listen.js'
export { consoleLogger, type Logger, type LogMethod, silentLogger } from './logger.js'
export {
  DEFAULT_SUBSCRIPTION_LABELS,
  LATENCY_BUCKETS,
  type MetricsOptions,
  type MetricsRegistry,
  REQUEST_DURATION_BUCKETS,
  type SubscriptionLabels,
} from './metrics.js'
export { isPublicAddress, PrivateAddressError } from './network-guard.js'
export {
  DEFAULT_BATCH_SIZE,
  DEFAULT_CONCURRENCY,
  DEFAULT_DELIVERY_LOG,
  DEFAULT_ENDPOINT_BREAKER,
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_BUFFERED_BYTES,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type DeliveryLog,
  type Endpoint,
  type EndpointBreakerOptions,
  type EndpointEvent,
  LEASE_MARGIN_MS,
  type OnExhausted,
  type RelayOptions,
  type ResolvedRelayOptions,
} from './options.js'
export { DEFAULT_OUTBOX_DISABLED_RETENTION_MS } from './paused-subscription.js'
export {
  DEFAULT_OUTBOX_PRUNE_BATCH_SIZE,
  DEFAULT_OUTBOX_PRUNE_MAX_BATCHES,
  DEFAULT_PRUNE_BATCH_SIZE,
  DEFAULT_PRUNE_MAX_BATCHES,
  type PruneOptions,
  type PrunePass,
  type PruneResult,
  prune,
} from './prune.js'
export {
  DEFAULT_REENCRYPT_BATCH_SIZE,
  type ReencryptSecretsOptions,
  type ReencryptSecretsResult,
  reencryptSecrets,
} from './reencrypt-secrets.js'
export { Relay, type RunOnceResult, type StopOptions } from './relay.js'
export {
  DEFAULT_REPLAY_BATCH_SIZE,
  DEFAULT_REPLAY_LEASE_WAIT_MS,
  type ReplayOptions,
  type ReplayProgress,
  type ReplayResult,
  replay,
} from './replay.js'
export {
  DEFAULT_RETRY_SCHEDULE,
  MAX_CONFLICT_PARK_MS,
  MAX_RETRY_AFTER_MS,
  MIN_CONFLICT_PARK_MS,
  RETRY_JITTER,
  retryAfterFloorMs,
  retryHorizonMs,
} from './retry-policy.js'
export {
  DEFAULT_PRODUCER_ROLES,
  type ProducerGrantsOptions,
  type ProducerRoles,
  producerGrantsSql,
} from './role-grants.js'
export {
  type BlockedReason,
  type EventStatus,
  type MigrateOptions,
  migrate,
  type OutboxCounterTable,
  type OutboxDeliveryAttemptTable,
  type OutboxLaneTable,
  type OutboxSubscriptionSecretTable,
  type OutboxSubscriptionTable,
  type OutboxTable,
  PRODUCER_MIGRATION_TABLE,
  type ProducerDatabase,
  producerMigrationSql,
} from './schema.js'
export { DEFAULT_SCHEMA, notifyChannel } from './schema-name.js'
export type { SecretKeys } from './secret-keys.js'
export type { AttemptOutcome } from './sql/delivery-attempt-log.js'
export {
  type OutboxStats,
  STRUGGLING_ATTEMPTS,
  type StatsFigures,
  type SubscriptionStats,
  stats,
} from './stats.js'
export {
  type BackfillProgress,
  type CreateSubscriptionInput,
  createSubscription,
  DEFAULT_SECRET_OVERLAP_MS,
  deleteSubscription,
  disableSubscription,
  type EndpointHealth,
  enableSubscription,
  getSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  listSubscriptions,
  rotateSubscriptionSecret,
  type SecretWriteOptions,
  type StartAt,
  type Subscription,
  type SubscriptionCallOptions,
  type SubscriptionChanges,
  type SubscriptionSettings,
  updateSubscription,
} from './subscriptions.js'
export {
  MAX_THROUGHPUT_BUCKETS,
  type ThroughputBucket,
  type ThroughputOptions,
  throughput,
} from './throughput.js'
