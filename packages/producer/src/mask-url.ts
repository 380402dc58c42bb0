/**
 * A URL as a listing shows it by default: its user-info and every query value masked (`?token=***`), the scheme,
 * host and path kept. A subscriber's URL often carries its credentials there, and a listing ends up in terminals,
 * tickets and screen shares. Text that is not a URL is returned as it is.
 *
 * @example
 * ```ts
 * maskUrl('https://hooks:s3cret@acme.example/in?token=abc') // 'https://***@acme.example/in?token=***'
 * ```
 */
export function maskUrl(url: string): string {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return url
  }
  const userInfo = parsed.username !== '' || parsed.password !== '' ? '***@' : ''
  const query = [...parsed.searchParams.keys()].map((key) => `${encodeURIComponent(key)}=***`).join('&')
  return `${parsed.protocol}//${userInfo}${parsed.host}${parsed.pathname}${query === '' ? '' : `?${query}`}`
}

/**
 * A connection string as `relay.options` shows it: the password masked (`postgres://relay:***@db/app`), the rest
 * kept so an operator can still tell which server it is. Text that is not a URL is returned masked whole.
 *
 * @example
 * ```ts
 * maskConnectionString('postgres://relay:s3cret@db/app') // 'postgres://relay:***@db/app'
 * ```
 */
export function maskConnectionString(connectionString: string): string {
  try {
    const parsed = new URL(connectionString)
    if (parsed.password !== '') parsed.password = '***'
    for (const key of [...parsed.searchParams.keys()]) {
      if (/pass|secret|key|token/i.test(key)) parsed.searchParams.set(key, '***')
    }
    return parsed.toString()
  } catch {
    // A key=value connection string may hold a password anywhere in it.
    return '***'
  }
}
