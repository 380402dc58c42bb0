import type { Request } from 'express'

/** How the browser reached the console: through a proxy in front of it when the console trusts one. */
export interface RequestOrigin {
  /** The host (and port) the browser addressed: what its `Origin` header must name. */
  readonly host: string | undefined
  /** Whether the browser's connection was TLS (to the console, or to the proxy in front). */
  readonly secure: boolean
  /** Who the request came from, for the login throttle. */
  readonly client: string
}

/** The value the nearest proxy wrote: the last of a comma-separated header, or its only one. */
function nearest(value: string | string[] | undefined): string | undefined {
  const joined = Array.isArray(value) ? value.join(',') : value
  if (joined === undefined) return undefined
  const last = joined.split(',').at(-1)?.trim()
  return last === '' ? undefined : last
}

/**
 * How the browser reached the console. Without `trustProxy`, the connection itself: its `Host` header, its TLS, its
 * peer address. With it, what the proxy in front says (`X-Forwarded-Host`, `X-Forwarded-Proto`,
 * `X-Forwarded-For`), falling back to the connection's own for a header it did not set. Only the nearest proxy's
 * entry of each is read: earlier entries came from whoever connected to the proxy, and anyone can write those.
 */
export function requestOrigin(request: Request, trustProxy: boolean): RequestOrigin {
  const tls = (request.socket as { encrypted?: boolean }).encrypted === true
  const peer = request.socket.remoteAddress ?? 'unknown'
  if (!trustProxy) return { host: request.headers.host, secure: tls, client: peer }
  const proto = nearest(request.headers['x-forwarded-proto'])?.toLowerCase()
  return {
    host: nearest(request.headers['x-forwarded-host']) ?? request.headers.host,
    secure: proto === undefined ? tls : proto === 'https',
    client: nearest(request.headers['x-forwarded-for']) ?? peer,
  }
}
