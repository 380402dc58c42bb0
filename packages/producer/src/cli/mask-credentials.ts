/** A URL's scheme and user-info part: `scheme://user:password@` or `scheme://token@`. */
const USER_INFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@:"']*)(?::([^\s/?#@"']*))?@/gi

/**
 * Masks the credentials of every URL in a text: `https://user:secret@host/…` becomes `https://user:***@host/…`,
 * and `https://token@host/…` (a user part alone is often a token) becomes `https://***@host/…`. The CLI runs
 * every log line and error message through it, so an endpoint or database URL quoted by any layer (the library,
 * pg, undici) never shows its password.
 *
 * @example
 * ```ts
 * maskCredentials('POST https://hooks:s3cret@billing.internal/in failed') // 'POST https://hooks:***@billing.internal/in failed'
 * ```
 */
export function maskCredentials(text: string): string {
  if (!text.includes('@')) return text
  return text.replace(USER_INFO, (_match, scheme: string, user: string, password: string | undefined) =>
    password === undefined ? `${scheme}***@` : `${scheme}${user}:***@`,
  )
}
