import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'
import { isPublicAddress } from '../network-guard.js'

/** How long the hint waits for DNS: it is advice, and a slow resolver must not hold up the command. */
const HINT_LOOKUP_TIMEOUT_MS = 1000

/**
 * The line `subscriptions create` prints when the URL's host is, or now resolves to, a loopback, private or
 * link-local address: relays refuse those unless started with `--allow-private-networks`, and without the hint the
 * operator learns it only from the first failed delivery. Undefined for a public host, or when DNS does not answer
 * in time (the relay checks again at every connection either way).
 *
 * @example
 * ```ts
 * await privateUrlHint('http://127.0.0.1:8080/hooks') // 'note: 127.0.0.1 is not a public address: …'
 * await privateUrlHint('https://example.com/hooks') // undefined
 * ```
 */
export async function privateUrlHint(url: string): Promise<string | undefined> {
  let hostname: string
  try {
    hostname = new URL(url).hostname
  } catch {
    return undefined
  }
  const host = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname
  const addresses =
    isIP(host) !== 0 ? [host] : await resolveWithin(host, HINT_LOOKUP_TIMEOUT_MS).catch(() => [])
  const refused = addresses.find((address) => !isPublicAddress(address))
  if (refused === undefined) return undefined
  const where = refused === host ? host : `${host} (${refused})`
  return `note: ${where} is not a public address: relays refuse to deliver to it unless started with --allow-private-networks`
}

async function resolveWithin(host: string, timeoutMs: number): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<string[]>((resolve) => {
    timer = setTimeout(() => resolve([]), timeoutMs)
    timer.unref()
  })
  try {
    const resolved = lookup(host, { all: true }).then((found) => found.map((one) => one.address))
    return await Promise.race([resolved, timeout])
  } finally {
    clearTimeout(timer)
  }
}
