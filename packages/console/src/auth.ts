import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Request } from 'express'
import type { ConsoleUser, ResolvedConsoleOptions } from './options.js'

/** The session cookie's name. */
export const SESSION_COOKIE = 'outbox_console'

/** How long a console session lasts after its login. */
export const SESSION_TTL_MS = 12 * 3600_000

/** Sessions kept at most: the oldest is dropped past it, so logins in a loop cannot grow memory. */
const MAX_SESSIONS = 1000

/** The actor a single `token` given without an `actor` acts under, in the audit log. */
export const TOKEN_ACTOR = 'token'

/** A user the console recognised, and how: bearer requests skip the form token (see `csrf.ts`). */
export interface Authenticated extends ConsoleUser {
  readonly via: 'bearer' | 'session' | 'authorize'
  /** The value each POST form must carry back (none for bearer requests). */
  readonly csrfToken: string | undefined
}

interface Session {
  /** Whose token opened it: the audit log's actor for everything done in it. */
  readonly actor: string
  readonly csrfToken: string
  readonly expiresAt: number
}

/**
 * Compares two secrets in time that does not depend on where they differ: both are hashed first, so even their
 * lengths leak nothing (`timingSafeEqual` alone throws on different lengths).
 */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest()
  const b = createHash('sha256').update(expected).digest()
  return timingSafeEqual(a, b)
}

function cookie(request: Request, name: string): string | undefined {
  const header = request.headers.cookie
  if (header === undefined) return undefined
  for (const part of header.split(';')) {
    const at = part.indexOf('=')
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim()
  }
  return undefined
}

/**
 * Who may use the console: the token as a bearer header, a session cookie from `/login`, or the app's
 * `authorize` hook. Sessions live in this process's memory only (a random id maps to its form token): a restart
 * logs everyone out, which for an operator's console is the right failure.
 */
export class ConsoleAuth {
  readonly #sessions = new Map<string, Session>()
  /** Key of the form tokens of `authorize` users, who have no console session: an HMAC of their actor. */
  readonly #formKey = randomBytes(32)

  constructor(private readonly options: ResolvedConsoleOptions) {}

  /**
   * The actor whose token `token` is, or undefined when it is none of the console's. Every token is compared, so
   * the time taken does not tell which one matched.
   */
  actorOf(token: unknown): string | undefined {
    if (typeof token !== 'string') return undefined
    let actor: string | undefined
    for (const entry of this.options.tokens) {
      if (sameSecret(token, entry.token)) actor ??= entry.actor
    }
    return actor
  }

  /** Starts a session for `actor` after a good login: returns its id, for the cookie. */
  startSession(actor: string): string {
    const id = randomBytes(32).toString('base64url')
    this.#sessions.set(id, {
      actor,
      csrfToken: randomBytes(32).toString('base64url'),
      expiresAt: Date.now() + SESSION_TTL_MS,
    })
    while (this.#sessions.size > MAX_SESSIONS) this.#sessions.delete(this.#sessions.keys().next().value!)
    return id
  }

  /** Ends the request's session, if it has one. */
  endSession(request: Request): void {
    const id = cookie(request, SESSION_COOKIE)
    if (id !== undefined) this.#sessions.delete(id)
  }

  /** The request's user, or null (401). */
  async authenticate(request: Request): Promise<Authenticated | null> {
    const canAct = this.options.actions
    const header = request.headers.authorization
    if (header !== undefined && /^Bearer /i.test(header)) {
      // A wrong bearer token is a 401 even if a cookie or the hook would let the request in: the caller said who
      // it is, and it was not so.
      const actor = this.actorOf(header.slice(7).trim())
      if (actor === undefined) return null
      return { actor, canAct, via: 'bearer', csrfToken: undefined }
    }
    const id = cookie(request, SESSION_COOKIE)
    const session = id === undefined ? undefined : this.#sessions.get(id)
    if (id !== undefined && session !== undefined) {
      if (session.expiresAt > Date.now()) {
        return { actor: session.actor, canAct, via: 'session', csrfToken: session.csrfToken }
      }
      this.#sessions.delete(id)
    }
    if (this.options.authorize === undefined) return null
    const user = await this.options.authorize(request)
    if (user === null || user === undefined) return null
    return {
      actor: user.actor,
      canAct: canAct && user.canAct === true,
      via: 'authorize',
      csrfToken: createHmac('sha256', this.#formKey).update(user.actor).digest('base64url'),
    }
  }
}
