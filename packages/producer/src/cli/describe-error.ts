import type { OutboxError } from '../index.js'
import { CliError } from './cli-error.js'
import type { DatabaseTarget } from './open-database.js'
import { flagMessage } from './option-flags.js'

interface ErrorLike {
  readonly code?: unknown
  readonly message?: unknown
  readonly severity?: unknown
  readonly hostname?: unknown
  readonly cause?: unknown
  readonly errors?: unknown
}

/**
 * Recognises the library's error by its name and code rather than `instanceof`: this module is loaded for every
 * run, and importing the library's classes here would load all of it just to print help.
 */
function isOutboxError(error: unknown): error is OutboxError {
  const { name, code } = (error ?? {}) as { name?: unknown; code?: unknown }
  return name === 'OutboxError' && typeof code === 'string' && code.startsWith('ERR_OUTBOX_')
}

/** The error itself, then its causes and, for an AggregateError (dual-stack connects), its first member. */
function* chain(error: unknown): Generator<ErrorLike> {
  const seen = new Set<unknown>()
  let current: unknown = error
  while (typeof current === 'object' && current !== null && !seen.has(current)) {
    seen.add(current)
    const like = current as ErrorLike
    yield like
    const first = Array.isArray(like.errors) ? like.errors[0] : undefined
    current = like.cause ?? first
  }
}

function messageOf(error: ErrorLike): string {
  return String(error.message ?? error).split('\n')[0]!
}

/**
 * Turns a connection or PostgreSQL failure into one line that says what happened and what to check; undefined
 * when the error is not one. The line never contains the connection string (it may hold a password).
 */
export function explainDatabaseError(error: unknown, target?: DatabaseTarget): string | undefined {
  const where = target ? `PostgreSQL at ${target.where}` : 'PostgreSQL'
  const schema = target?.schema ?? 'public'
  for (const link of chain(error)) {
    // Its own message is already written for people; only what it wraps may need explaining.
    if (isOutboxError(link)) continue
    const code = typeof link.code === 'string' ? link.code : undefined
    const message = messageOf(link)
    switch (code) {
      case 'ECONNREFUSED':
        return `cannot connect to ${where}: connection refused; check DATABASE_URL (is the server running and listening there?)`
      case 'ENOTFOUND':
      case 'EAI_AGAIN':
        return `cannot resolve the database host ${typeof link.hostname === 'string' ? link.hostname : (target?.where ?? '')}; check DATABASE_URL`
      case 'ETIMEDOUT':
        return `timed out connecting to ${where}; check DATABASE_URL and the network`
      case 'EHOSTUNREACH':
      case 'ENETUNREACH':
        return `cannot reach ${where}: no route to host; check DATABASE_URL and the network`
      case 'ENOENT':
        return `cannot connect to ${where}: no such socket; check DATABASE_URL (is the server running?)`
      case 'ECONNRESET':
        return `${where} closed the connection (${message}); check DATABASE_URL, and sslmode if the server requires TLS`
      case '28P01':
        return `${where} rejected the password of user "${target?.user ?? ''}"; check DATABASE_URL`
      case '28000':
        return `${where} refused the connection: ${message}; check DATABASE_URL`
      case '3D000':
        return `${message} on ${where}; check DATABASE_URL`
      case '42P01':
      case '3F000':
        return `the outbox tables are missing in schema "${schema}" (${message}); run: outbox migrate${schema === 'public' ? '' : ` --schema ${schema}`}`
      case '42501':
        return `permission denied on ${where}: ${message}; the database user needs rights on schema "${schema}"`
      case '53300':
        return `${where} has no free connections (${message}); try again or raise max_connections`
      case '57P01':
      case '57P02':
      case '57P03':
        return `${where} is shutting down or starting up (${message}); try again shortly`
    }
    if (/timeout/i.test(message) && /connect/i.test(message)) {
      return `timed out connecting to ${where}; check DATABASE_URL and the network`
    }
    if (/Connection terminated/i.test(message)) {
      return `${where} closed the connection (${message}); check DATABASE_URL, and sslmode if the server requires TLS`
    }
    if (/\bSSL\b|\bTLS\b|certificate/i.test(message)) {
      return `TLS problem with ${where}: ${message}; check sslmode in DATABASE_URL`
    }
    if (code !== undefined && /^[0-9A-Z]{5}$/.test(code) && typeof link.severity === 'string') {
      return `${where} answered error ${code}: ${message}`
    }
  }
  return undefined
}

/**
 * Failures that say the database is not there YET — nothing listens, its name does not resolve (a service whose DNS
 * record appears with it), the network or the server is still coming up, it has no free connection — as opposed
 * to a wrong password, a missing database or missing tables, which waiting never heals.
 */
const NOT_YET_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOENT',
  'ECONNRESET',
  '53300',
  '57P01',
  '57P02',
  '57P03',
])

/**
 * True when `error` says the database cannot be reached yet ({@link NOT_YET_CODES}, or pg's own words for a connect
 * that timed out or a connection the server cut): a relay started beside its database waits for it rather than
 * exiting.
 */
export function isDatabaseNotYetUp(error: unknown): boolean {
  for (const link of chain(error)) {
    if (isOutboxError(link)) continue
    if (typeof link.code === 'string' && NOT_YET_CODES.has(link.code)) return true
    const message = messageOf(link)
    if ((/timeout/i.test(message) && /connect/i.test(message)) || /Connection terminated/i.test(message))
      return true
  }
  return false
}

/** True when `error` says the outbox tables (or their schema) do not exist: `outbox migrate` has not run. */
export function isOutboxSchemaMissing(error: unknown): boolean {
  for (const link of chain(error)) {
    if (link.code === '42P01' || link.code === '3F000') return true
  }
  return false
}

/**
 * Refusals of an operator action (`outbox lanes unblock|skip-head`): the lane is held by a relay, busy, not in the
 * state the action needs, or the action would bend an ordering guarantee. The library's message already says what
 * to do instead; they are runtime outcomes (exit 1), not usage errors — the command line was right.
 */
const ACTION_REFUSALS: ReadonlySet<string> = new Set([
  'ERR_OUTBOX_LANE_NOT_FOUND',
  'ERR_OUTBOX_LANE_LEASED',
  'ERR_OUTBOX_LANE_BUSY',
  'ERR_OUTBOX_REFUSED',
])

/** What the top level prints and exits with for any error. */
export interface ErrorReport {
  readonly message: string
  readonly exitCode: number
}

/**
 * Maps any error to one line and an exit code: {@link CliError}s as they are, `OutboxError`s by their message
 * (invalid options are usage errors, exit 2, named by their flag), database failures explained, anything else as "unexpected error".
 */
export function describeError(error: unknown): ErrorReport {
  if (error instanceof CliError) return { message: error.message, exitCode: error.exitCode }
  const database = explainDatabaseError(error)
  if (database !== undefined && !isOutboxError(error)) return { message: database, exitCode: 1 }
  if (isOutboxError(error) && ACTION_REFUSALS.has(error.code)) {
    return { message: error.message, exitCode: 1 }
  }
  if (isOutboxError(error)) {
    return {
      // An option error no command mapped is still reported under its flag, never the library's option name.
      message: database ?? flagMessage(error) ?? error.message,
      exitCode: error.code === 'ERR_OUTBOX_INVALID_OPTION' ? 2 : 1,
    }
  }
  const message = error instanceof Error ? error.message : String(error)
  return { message: `unexpected error: ${message.split('\n')[0]}`, exitCode: 1 }
}
