import { IMPLICIT_SUBSCRIPTION_ID } from '../delivery-target.js'
import type { Logger, Relay } from '../index.js'
import { explainDatabaseError } from './describe-error.js'
import { maskCredentials } from './mask-credentials.js'
import type { DatabaseTarget } from './open-database.js'

/** How relay log lines are written: `key=value` text for people, one JSON object per line for log pipelines. */
export type LogFormat = 'text' | 'json'
/** Severity of a log line, lowest first. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

/** The severities in order; a line is written when its level is at or above the chosen one. */
export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error']

/** A field as written: errors as their message, and any URL's credentials masked (see {@link maskCredentials}). */
function plain(value: unknown): unknown {
  if (value instanceof Error) return maskCredentials(value.message)
  if (value instanceof Date) return value.toISOString()
  if (typeof value === 'string') return maskCredentials(value)
  return value
}

function textValue(value: unknown): string {
  const flat = plain(value)
  if (typeof flat === 'string') return /^[^\s"=]+$/.test(flat) ? flat : JSON.stringify(flat)
  if (typeof flat === 'object' && flat !== null) return JSON.stringify(flat)
  return String(flat)
}

/**
 * Creates the CLI's {@link Logger} (the library's one logger type, pino's `(fields, message)` order). Text lines
 * read `<time> <LEVEL> <message> key=value …` with the aggregate shown as `lane=type:id`; JSON lines are
 * `{"time","level","msg",…fields}` with every field kept apart. Field values may be anything; errors are reduced
 * to their message.
 */
export function createCliLogger(format: LogFormat, minimum: LogLevel, stream: NodeJS.WritableStream): Logger {
  const threshold = LOG_LEVELS.indexOf(minimum)
  const write = (level: LogLevel, fields: Record<string, unknown>, text: string) => {
    if (LOG_LEVELS.indexOf(level) < threshold) return
    const message = maskCredentials(text)
    const time = new Date().toISOString()
    if (format === 'json') {
      const entries = Object.entries(fields)
        .filter(([, value]) => value !== undefined)
        .map(([key, value]) => [key, plain(value)])
      stream.write(`${JSON.stringify({ time, level, msg: message, ...Object.fromEntries(entries) })}\n`)
      return
    }
    const { aggregateType, aggregateId, subscriptionId, subscriptionName, ...rest } = fields
    const parts = [time, level.toUpperCase().padEnd(5), message]
    // A single-endpoint relay's lines stay as they were: the implicit subscription goes without saying.
    if (subscriptionId !== undefined && subscriptionId !== IMPLICIT_SUBSCRIPTION_ID) {
      if (subscriptionName !== undefined) parts.push(`subscription=${textValue(subscriptionName)}`)
      parts.push(`subscriptionId=${textValue(subscriptionId)}`)
    }
    if (aggregateType !== undefined) parts.push(`lane=${textValue(`${aggregateType}:${aggregateId}`)}`)
    for (const [key, value] of Object.entries(rest)) {
      if (value !== undefined && value !== null) parts.push(`${key}=${textValue(value)}`)
    }
    stream.write(`${parts.join(' ')}\n`)
  }
  return {
    debug: (fields, message) => write('debug', fields, message),
    info: (fields, message) => write('info', fields, message),
    warn: (fields, message) => write('warn', fields, message),
    error: (fields, message) => write('error', fields, message),
  }
}

/**
 * Subscribes to every relay event an operator acts on and writes one line for each: deliveries (success, retry,
 * dead, stale), parked and taken-over lanes, and errors outside one delivery (explained when they are database
 * failures, e.g. "connection refused").
 */
export function logRelayEvents(relay: Relay, log: Logger, target: DatabaseTarget): void {
  relay.on('delivery:success', (event) => log.info({ event: 'delivery:success', ...event }, 'delivered'))
  relay.on('delivery:retry', (event) =>
    log.warn({ event: 'delivery:retry', ...event }, 'delivery failed; will retry'),
  )
  relay.on('delivery:dead', (event) =>
    log.error({ event: 'delivery:dead', ...event }, 'dead-lettered (see: outbox dead-letters list)'),
  )
  relay.on('delivery:stale', (event) =>
    log.warn(
      { event: 'delivery:stale', ...event },
      'consumer answered stale_ignored: it already applied a later event of this aggregate',
    ),
  )
  relay.on('lane:blocked', (event) =>
    log.warn(
      { event: 'lane:blocked', ...event },
      event.reason === 'conflict'
        ? 'lane parked: the consumer answered 409 (waiting for an earlier sequence)'
        : 'lane blocked: its head is dead-lettered under --on-exhausted block; redrive it to resume',
    ),
  )
  relay.on('lane:takeover', (event) =>
    log.warn(
      { event: 'lane:takeover', ...event },
      'lane taken over from an expired claim; its head was charged one attempt',
    ),
  )
  relay.on('subscription:skipped', (event) =>
    log.warn({ event: 'subscription:skipped', ...event }, 'subscription skipped until it is fixed'),
  )
  relay.on('subscription:disabled', (event) =>
    log.warn(
      { event: 'subscription:disabled', ...event },
      'endpoint answered 410 Gone: subscription disabled (outbox subscriptions enable <id> resumes it)',
    ),
  )
  relay.on('subscription:backfill', (event) =>
    event.state === 'done'
      ? log.info({ event: 'subscription:backfill', ...event }, 'subscription backfill done: delivering')
      : log.debug({ event: 'subscription:backfill', ...event }, 'subscription backfill batch copied'),
  )
  relay.on('subscription:backfill:waiting', (event) =>
    log.warn(
      { event: 'subscription:backfill:waiting', ...event },
      'subscription backfill waits for a transaction holding one of its aggregates (an enqueue left open?); retrying',
    ),
  )
  relay.on('endpoint:opened', (event) =>
    log.warn({ event: 'endpoint:opened', ...event }, 'endpoint breaker opened: its lanes wait for a probe'),
  )
  relay.on('endpoint:probing', (event) =>
    log.info({ event: 'endpoint:probing', ...event }, 'endpoint breaker open: sending its probe'),
  )
  relay.on('endpoint:closed', (event) =>
    log.info({ event: 'endpoint:closed', ...event }, 'endpoint breaker closed: the probe was answered'),
  )
  relay.on('relay:error', ({ error, during }) =>
    log.error(
      { event: 'relay:error', during, error: explainDatabaseError(error, target) ?? error },
      `relay ${during} failed; retrying`,
    ),
  )
}
