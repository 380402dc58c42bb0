import type { Request } from 'express'
import type { Authenticated } from './auth.js'
import { sameSecret } from './auth.js'
import { requestOrigin } from './forwarded.js'

/** The hidden form field every POST form carries. */
export const CSRF_FIELD = '_csrf'

/**
 * Why a POST must be refused as a cross-site request forgery, or null when it may run. Two independent checks:
 * the browser's own word (`Sec-Fetch-Site: cross-site`, or an `Origin` that is not this host), which a page on
 * another site cannot forge; and the session's form token, which it cannot read. Bearer requests skip the form
 * token — a browser never adds an `Authorization` header on its own — but not the origin check.
 */
export function forgeryReason(request: Request, user: Authenticated, trustProxy: boolean): string | null {
  const crossSite = crossSiteReason(request, trustProxy)
  if (crossSite !== null) return crossSite
  if (user.via === 'bearer') return null
  const given = (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD]
  if (typeof given !== 'string' || user.csrfToken === undefined || !sameSecret(given, user.csrfToken)) {
    return 'a form without this session’s token (reload the page and try again)'
  }
  return null
}

/**
 * Why a POST comes from another origin, or null. `Sec-Fetch-Site` other than `same-origin` (or `none`: typed by the
 * user) is refused — `cross-site`, and `same-site` too, a page on another port of this host; an `Origin` whose
 * host is not the request's `Host` is refused. `Origin: null` is what Chromium sends from the console's own pages,
 * because they are served with `Referrer-Policy: no-referrer`: it passes only with `Sec-Fetch-Site: same-origin`.
 * The login form has no session token yet, so this alone guards it (no login forgery). Behind a trusted proxy the
 * host is the one the browser addressed (`X-Forwarded-Host`), not the one the proxy wrote into `Host`.
 */
export function crossSiteReason(request: Request, trustProxy: boolean): string | null {
  const site = request.headers['sec-fetch-site']
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return `a ${site} request`
  const origin = request.headers.origin
  if (origin === undefined) return null
  if (origin === 'null') return site === 'same-origin' ? null : 'a request from an opaque origin'
  let host: string
  try {
    host = new URL(origin).host
  } catch {
    return `a request with an unreadable Origin (${origin})`
  }
  return host === requestOrigin(request, trustProxy).host ? null : `a request from another origin (${origin})`
}
