export type {
  EventCatalog,
  EventOf,
  EventTypeOf,
  PayloadOf,
  ReceivedEventOf,
  UntypedCatalog,
} from './catalog.js'
export { type Duration, parseDuration } from './duration.js'
export {
  fromWireEnvelope,
  type JsonValue,
  MAX_KEY_LENGTH,
  type OutboxEvent,
  type ParseEnvelopeResult,
  parseEnvelope,
  serializeEnvelope,
  spliceEnvelope,
  toWireEnvelope,
  validateEnvelope,
  type WireEnvelope,
} from './envelope.js'
export {
  invalidOption,
  type OptionMessage,
  OutboxError,
  type OutboxErrorCode,
  type OutboxErrorOptions,
  ProtocolError,
  type ProtocolErrorCode,
} from './errors.js'
export { EventHub } from './event-hub.js'
export { CONTENT_TYPE_JSON, CONTENT_TYPE_PROBLEM, HEADERS } from './headers.js'
export { consoleLogger, isLogger, type Logger, type LogMethod, silentLogger } from './logger.js'
export type { MetricsRegistry } from './metrics-registry.js'
export {
  DELIVERY_STATUSES,
  type DeliveryStatus,
  PROBLEM_TYPE_BASE,
  PROBLEMS,
  type ProblemCode,
  type ProblemDetails,
  problem,
} from './problems.js'
export type { ReceivedEvent } from './received-event.js'
export { DEFAULT_SCHEMA, resolveSchema } from './schema-name.js'
export {
  MIN_SIGNING_SECRET_BYTES,
  parseSigningSecrets,
  type SignInput,
  type SigningKey,
  signWebhook,
  type VerifyResult,
  verifyWebhook,
} from './signature.js'
export {
  checkSignatureHeaders,
  DEFAULT_SIGNATURE_TOLERANCE_SECONDS,
  type HeaderGetter,
  type IncomingHeaders,
  type SignatureFailure,
  type VerifyOptions,
} from './signature-headers.js'
export { isUuid } from './uuid.js'
