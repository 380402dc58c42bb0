import type { Request } from 'express'
import type { Authenticated } from './auth.js'
import { sameSecret } from './auth.js'

/** The hidden form field every POST form carries. */
export const CSRF_FIELD = '_csrf'

/**
 * Why a POST must be refused as a cross-site request forgery, or null when it may run. Two independent checks:
 * the browser's own word (`Sec-Fetch-Site: cross-site`, or an `Origin` that is not this host), which a page on
 * another site cannot forge; and the session's form token, which it cannot read. Bearer requests skip the form
 * token — a browser never adds an `Authorization` header on its own — but not the origin check.
 */
export function forgeryReason(request: Request, user: Authenticated): string | null {
  const crossSite = crossSiteReason(request)
  if (crossSite !== null) return crossSite
  if (user.via === 'bearer') return null
  const given = (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD]
  if (typeof given !== 'string' || user.csrfToken === undefined || !sameSecret(given, user.csrfToken)) {
    return 'a form without this session’s token (reload the page and try again)'
  }
  return null
}

/**
 * Why a POST comes from another site, or null: `Sec-Fetch-Site: cross-site`, or an `Origin` whose host is not the
 * request's `Host`. The login form has no session token yet, so this alone guards it (no login forgery).
 */
export function crossSiteReason(request: Request): string | null {
  if (request.headers['sec-fetch-site'] === 'cross-site') return 'a cross-site request'
  const origin = request.headers.origin
  if (origin !== undefined) {
    let host: string
    try {
      host = new URL(origin).host
    } catch {
      return `an unreadable Origin ${origin}`
    }
    if (origin === 'null' || host !== request.headers.host) return `a request from another origin (${origin})`
  }
  return null
}
