import { invalidOption } from '@outbox/protocol'
import type { Request } from 'express'
import type { Kysely } from 'kysely'

/** Who is looking at the console, as {@link ConsoleOptions.authorize} decides. */
export interface ConsoleUser {
  /** The name the audit log records this user's actions under. */
  readonly actor: string
  /** Whether this user may act (unblock, skip, redrive, discard), when the console's `actions` are on. */
  readonly canAct: boolean
}

/** Options of {@link createConsole}. */
export interface ConsoleOptions {
  /** The producer's database (a Kysely instance on the application's pool). */
  readonly db: Kysely<any>
  /**
   * A shared secret: sent as `Authorization: Bearer <token>`, or typed once into `/login` for a session cookie.
   * Its users act as actor `'token'`. At least one of `token` and `authorize` is required.
   */
  readonly token?: string
  /**
   * Decides who a request comes from, with the admin app's own authentication (e.g. its session): a user, or null
   * for 401. Consulted when no token or console session authenticated the request.
   */
  readonly authorize?: (request: Request) => ConsoleUser | null | Promise<ConsoleUser | null>
  /** Shows the action buttons and accepts their POSTs (for users who can act). @defaultValue false: read only */
  readonly actions?: boolean
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** How often the pages refresh and the lag is sampled, in milliseconds. @defaultValue 5000 */
  readonly refreshMs?: number
  /** `statement_timeout` of the reads behind each page, in milliseconds. @defaultValue 5000 */
  readonly statementTimeoutMs?: number
  /**
   * The path the console is reached at in links, the cookie's Path and redirects, when a proxy in front changes
   * it. @defaultValue the path the router is mounted at (`req.baseUrl`)
   */
  readonly basePath?: string
}

/** {@link ConsoleOptions.refreshMs}'s default. */
export const DEFAULT_REFRESH_MS = 5000
/** {@link ConsoleOptions.statementTimeoutMs}'s default. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5000

/** {@link ConsoleOptions} checked once, defaulted and frozen. */
export interface ResolvedConsoleOptions {
  readonly db: Kysely<any>
  readonly token: string | undefined
  readonly authorize: ConsoleOptions['authorize']
  readonly actions: boolean
  readonly schema: string | undefined
  readonly refreshMs: number
  readonly statementTimeoutMs: number
  readonly basePath: string | undefined
}

function positiveMs(value: unknown, fallback: number, option: string): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 100) {
    throw invalidOption(
      option,
      value,
      (name, got) => `${name(option)} must be a whole number of milliseconds of at least 100, got ${got}`,
    )
  }
  return value
}

/** Checks {@link ConsoleOptions} when the console is created, so a mistake fails at start-up, not at a request. */
export function resolveConsoleOptions(options: ConsoleOptions): ResolvedConsoleOptions {
  if (typeof options !== 'object' || options === null || typeof options.db?.transaction !== 'function') {
    throw invalidOption('db', options?.db, (name) => `${name('db')} must be a Kysely instance`)
  }
  const { token, authorize } = options
  if (token === undefined && authorize === undefined) {
    throw invalidOption(
      'token',
      token,
      (name) =>
        `the console needs ${name('token')} or ${name('authorize')}: it never serves the outbox to anyone who asks`,
    )
  }
  if (token !== undefined && (typeof token !== 'string' || token.length < 16)) {
    throw invalidOption(
      'token',
      typeof token === 'string' ? `${token.length} characters` : token,
      (name, got) => `${name('token')} must be a string of at least 16 characters, got ${got}`,
    )
  }
  if (authorize !== undefined && typeof authorize !== 'function') {
    throw invalidOption('authorize', authorize, (name) => `${name('authorize')} must be a function`)
  }
  if (options.actions !== undefined && typeof options.actions !== 'boolean') {
    throw invalidOption(
      'actions',
      options.actions,
      (name, got) => `${name('actions')} must be true or false, got ${got}`,
    )
  }
  const basePath = options.basePath
  if (basePath !== undefined && (typeof basePath !== 'string' || !/^(\/[\w.~-]+)*$/.test(basePath))) {
    throw invalidOption(
      'basePath',
      basePath,
      (name, got) =>
        `${name('basePath')} must be a path like '/admin/outbox' (no trailing slash), or '', got ${got}`,
    )
  }
  return Object.freeze({
    db: options.db,
    token,
    authorize,
    actions: options.actions ?? false,
    schema: options.schema,
    refreshMs: positiveMs(options.refreshMs, DEFAULT_REFRESH_MS, 'refreshMs'),
    statementTimeoutMs: positiveMs(
      options.statementTimeoutMs,
      DEFAULT_STATEMENT_TIMEOUT_MS,
      'statementTimeoutMs',
    ),
    basePath,
  })
}
