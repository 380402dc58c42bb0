import { type LookupAddress, type LookupAllOptions, lookup } from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import ipaddr from 'ipaddr.js'
import { OutboxError } from './errors.js'

/**
 * How a non-public address is named in a refusal (`loopback`, `private`, `linkLocal`, …: ipaddr.js's range names),
 * or `null` for a public one. `not an IP address` for anything that does not parse as one.
 */
function nonPublicRange(address: string): string | null {
  // net.isIP first: ipaddr.js also accepts legacy IPv4 spellings (`0x7f.1`, `127.1`) that no resolver returns;
  // whatever is not a plain address is refused rather than guessed at.
  if (isIP(address) === 0) return 'not an IP address'
  let parsed: ipaddr.IPv4 | ipaddr.IPv6
  try {
    parsed = ipaddr.parse(address)
  } catch {
    return 'not an IP address'
  }
  return rangeOf(parsed)
}

function rangeOf(ip: ipaddr.IPv4 | ipaddr.IPv6): string | null {
  if (ip.kind() === 'ipv4') {
    const range = (ip as ipaddr.IPv4).range()
    return range === 'unicast' ? null : range
  }
  const v6 = ip as ipaddr.IPv6
  const range = v6.range()
  switch (range) {
    case 'unicast':
      // ::/8 holds the deprecated IPv4-compatible form (::127.0.0.1) and other reserved space ipaddr.js leaves
      // as 'unicast'; a stack with a 6in4 tunnel may still route it to the embedded IPv4 address.
      return v6.parts[0]! < 0x100 ? 'reserved' : null
    case 'ipv4Mapped':
      // ::ffff:127.0.0.1 reaches 127.0.0.1 on a dual-stack socket: judge the IPv4 address it carries.
      return rangeOf(v6.toIPv4Address())
    case 'rfc6052': {
      // NAT64's well-known prefix 64:ff9b::/96 is what DNS64 answers for every IPv4-only host on an IPv6-only
      // network, so refusing it outright would refuse the whole IPv4 internet there: judge the embedded address.
      // The local-use prefix 64:ff9b:1::/48 may embed it at any of several offsets, so it cannot be told: refused.
      const wellKnown = v6.parts.slice(2, 6).every((part) => part === 0)
      return wellKnown ? rangeOf(embeddedIPv4(v6.parts[6]!, v6.parts[7]!)) : range
    }
    case '6to4':
      // 2002:AABB:CCDD::/48 is relayed to the IPv4 address AA.BB.CC.DD.
      return rangeOf(embeddedIPv4(v6.parts[1]!, v6.parts[2]!))
    default:
      // Teredo (its client address is obfuscated), IPv4-translated, unique-local, link-local, multicast, …
      return range
  }
}

/** ipaddr.js's range names as a refusal spells them; the others are shown as they are. */
const RANGE_WORDS: Readonly<Record<string, string>> = {
  linkLocal: 'link-local',
  uniqueLocal: 'unique-local',
  carrierGradeNat: 'carrier-grade NAT',
  rfc6052: 'NAT64',
  rfc6145: 'IPv4-translated',
  deprecatedSiteLocal: 'site-local',
}

function embeddedIPv4(high: number, low: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff])
}

/**
 * True when `address` (an IPv4 or IPv6 address as a resolver returns it) is a public unicast address a customer's
 * webhook may point at; false for loopback, private (10/8, 172.16/12, 192.168/16), link-local (169.254/16, where
 * cloud metadata services listen, and fe80::/10), unique-local (fc00::/7), unspecified, carrier-grade NAT
 * (100.64/10), multicast, broadcast, reserved and documentation ranges, any of those wrapped in IPv6 (IPv4-mapped
 * `::ffff:…`, NAT64 `64:ff9b::…`, 6to4 `2002:…`), Teredo, and anything that is not an IP address.
 *
 * @example
 * ```ts
 * import { isPublicAddress } from '@outbox/producer'
 * isPublicAddress('93.184.216.34') // true
 * isPublicAddress('169.254.169.254') // false: link-local (cloud metadata)
 * isPublicAddress('::ffff:127.0.0.1') // false: loopback, IPv4-mapped
 * ```
 */
export function isPublicAddress(address: string): boolean {
  return nonPublicRange(address) === null
}

/**
 * Why the relay did not connect to a stored subscription's URL: its host is, or resolves to, an address that is
 * not public ({@link isPublicAddress}). Code `ERR_OUTBOX_PRIVATE_ADDRESS`. The relay treats it as a failed attempt,
 * so its message ends up in the event's `last_error`.
 *
 * @example
 * ```ts
 * import { PrivateAddressError } from '@outbox/producer'
 * const error = new PrivateAddressError('localhost', '127.0.0.1')
 * error.code // 'ERR_OUTBOX_PRIVATE_ADDRESS'
 * ```
 */
export class PrivateAddressError extends OutboxError {
  /** The URL's host, a DNS name or an IP literal. */
  readonly host: string
  /** The refused address the host is or resolved to. */
  readonly address: string

  constructor(host: string, address: string) {
    const range = nonPublicRange(address)
    const word = range === null ? 'public' : (RANGE_WORDS[range] ?? range)
    const where = host === address ? `${address} (${word})` : `${host} (${address}, ${word})`
    super(
      'ERR_OUTBOX_PRIVATE_ADDRESS',
      `refused to connect to ${where}: subscription URLs may only reach public addresses; if this destination is meant to be internal, set the relay option allowPrivateNetworks: true (CLI --allow-private-networks)`,
    )
    this.host = host
    this.address = address
  }
}

/**
 * A `lookup` for `net.connect` (and so for undici's `connect` option) that resolves like `dns.lookup` but fails
 * with a {@link PrivateAddressError} when ANY address the name resolves to is not public: a name that answers one
 * public and one private address is refused whole, since the connection may use either. Checking at connect time,
 * on the very addresses connected to, closes DNS rebinding (a name that was public when the URL was saved and
 * resolves inside the network later). IP literals never reach a lookup: check those with {@link checkLiteralHost}.
 *
 * @example
 * ```ts
 * import { Agent } from 'undici'
 * import { guardedLookup } from './network-guard.js'
 * const agent = new Agent({ connect: { lookup: guardedLookup } })
 * ```
 */
export const guardedLookup: LookupFunction = guardLookup(lookup)

/** A resolver answering every address of a name, as `dns.lookup` does with `all: true`. */
export type ResolveAll = (
  hostname: string,
  options: LookupAllOptions,
  callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void

/**
 * {@link guardedLookup} over another resolver: what a test uses to answer a name with a mix of addresses.
 *
 * @example
 * ```ts
 * import { lookup } from 'node:dns'
 * import { guardLookup } from './network-guard.js'
 * const guarded = guardLookup(lookup)
 * ```
 */
export function guardLookup(resolve: ResolveAll): LookupFunction {
  return (hostname, options, callback) => {
    // Always ask for every address, so none can slip past the check; answer in the form the caller asked for.
    resolve(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) {
        callback(error, '')
        return
      }
      const refused = addresses.find((entry) => !isPublicAddress(entry.address))
      if (refused) {
        callback(new PrivateAddressError(hostname, refused.address), '')
        return
      }
      const first = addresses[0]
      if (options.all) callback(null, addresses)
      else if (first) callback(null, first.address, first.family)
      else callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), '')
    })
  }
}

/**
 * The refusal of a URL whose host is an IP literal that is not public, or undefined (a public literal, or a DNS
 * name, which {@link guardedLookup} checks when connecting). Needed because `net.connect` skips its `lookup` for a
 * literal.
 *
 * @example
 * ```ts
 * import { checkLiteralHost } from './network-guard.js'
 * checkLiteralHost(new URL('http://[::1]:8080/hooks'))?.code // 'ERR_OUTBOX_PRIVATE_ADDRESS'
 * checkLiteralHost(new URL('https://example.com/hooks')) // undefined
 * ```
 */
export function checkLiteralHost(url: URL): PrivateAddressError | undefined {
  const { hostname } = url
  // The URL parser has already turned every IPv4 spelling (`0x7f.1`, `2130706433`) into dotted decimal, and
  // writes IPv6 in brackets.
  const host = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname
  if (isIP(host) === 0 || isPublicAddress(host)) return undefined
  return new PrivateAddressError(host, host)
}
