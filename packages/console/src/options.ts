import { consoleLogger, invalidOption, type Logger } from '@outbox/protocol'
import type { Request } from 'express'
import type { Kysely } from 'kysely'
import { TOKEN_ACTOR } from './auth.js'
import { tokenWeakness } from './token-rule.js'

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
   * At least 22 characters, 16 of them distinct. Its users act as {@link ConsoleOptions.actor}. At least one of
   * `token`, `tokens` and `authorize` is required.
   */
  readonly token?: string
  /** The name the audit log records `token`'s users under: who holds it. @defaultValue {@link TOKEN_ACTOR} */
  readonly actor?: string
  /**
   * One token per person or team, each with the name the audit log records its actions under (each token as
   * strong as `token` must be). A request is whoever's token it carries.
   */
  readonly tokens?: readonly ConsoleToken[]
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
   * The console is reached through a proxy that terminates TLS (nginx, a load balancer): read how the browser
   * reached it from `X-Forwarded-Proto` (the session cookie is `Secure` over https), `X-Forwarded-Host` (what the
   * `Origin` check compares with: a proxy that rewrites `Host` would otherwise make every action 403) and
   * `X-Forwarded-For` (who the login throttle counts). Turn it on only behind a proxy that sets them, since anyone
   * can send these headers to a console reached directly. @defaultValue false
   */
  readonly trustProxy?: boolean
  /** Where the console says what needs attention (a burst of failed logins, once per burst). @defaultValue warnings and errors on stderr */
  readonly logger?: Logger
  /**
   * The path the console is reached at in links, the cookie's Path and redirects, when a proxy in front changes
   * it. @defaultValue the path the router is mounted at (`req.baseUrl`)
   */
  readonly basePath?: string
}

/** A console token and the actor its users act as (see {@link ConsoleOptions.tokens}). */
export interface ConsoleToken {
  /** The name the audit log records this token's actions under. */
  readonly actor: string
  readonly token: string
}

/** {@link ConsoleOptions.refreshMs}'s default. */
export const DEFAULT_REFRESH_MS = 5000
/** {@link ConsoleOptions.statementTimeoutMs}'s default. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5000

/** {@link ConsoleOptions} checked once, defaulted and frozen. */
export interface ResolvedConsoleOptions {
  readonly db: Kysely<any>
  /** Every token the console accepts, with its actor (empty without token login). */
  readonly tokens: readonly ConsoleToken[]
  readonly authorize: ConsoleOptions['authorize']
  readonly actions: boolean
  readonly schema: string | undefined
  readonly refreshMs: number
  readonly statementTimeoutMs: number
  readonly basePath: string | undefined
  readonly trustProxy: boolean
  readonly logger: Logger
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
  const tokens = resolveTokens(options)
  if (tokens.length === 0 && authorize === undefined) {
    throw invalidOption(
      'token',
      token,
      (name) =>
        `the console needs ${name('token')}, ${name('tokens')} or ${name('authorize')}: it never serves the outbox to anyone who asks`,
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
  if (options.trustProxy !== undefined && typeof options.trustProxy !== 'boolean') {
    throw invalidOption(
      'trustProxy',
      options.trustProxy,
      (name, got) => `${name('trustProxy')} must be true or false, got ${got}`,
    )
  }
  return Object.freeze({
    db: options.db,
    tokens,
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
    trustProxy: options.trustProxy ?? false,
    logger: options.logger ?? consoleLogger,
  })
}

function checkActor(actor: unknown, option: string): string {
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > 200) {
    throw invalidOption(
      option,
      actor,
      (name, got) => `${name(option)} must be a non-empty name of at most 200 characters, got ${got}`,
    )
  }
  return actor
}

function checkToken(token: unknown, option: string): string {
  const weakness = typeof token === 'string' ? tokenWeakness(token) : 'it is not a string'
  if (weakness !== undefined) {
    // The token itself is never echoed: only what is wrong with it.
    throw invalidOption(option, undefined, (name) => `${name(option)} is too weak: ${weakness}`)
  }
  return token as string
}

/** `token` (with `actor`) and `tokens`, checked, as one list; two entries may not share a token. */
function resolveTokens(options: ConsoleOptions): readonly ConsoleToken[] {
  const list: ConsoleToken[] = []
  if (options.token !== undefined) {
    list.push({
      token: checkToken(options.token, 'token'),
      actor: checkActor(options.actor ?? TOKEN_ACTOR, 'actor'),
    })
  } else if (options.actor !== undefined) {
    throw invalidOption(
      'actor',
      options.actor,
      (name) => `${name('actor')} names the holder of ${name('token')}: give both`,
    )
  }
  if (options.tokens !== undefined) {
    if (!Array.isArray(options.tokens)) {
      throw invalidOption(
        'tokens',
        undefined,
        (name) => `${name('tokens')} must be a list of { actor, token }`,
      )
    }
    for (const entry of options.tokens as readonly ConsoleToken[]) {
      list.push({ token: checkToken(entry?.token, 'tokens'), actor: checkActor(entry?.actor, 'tokens') })
    }
  }
  if (new Set(list.map((entry) => entry.token)).size !== list.length) {
    throw invalidOption(
      'tokens',
      undefined,
      (name) => `two of ${name('tokens')} are the same token: give each actor its own`,
    )
  }
  return Object.freeze(list.map((entry) => Object.freeze(entry)))
}
