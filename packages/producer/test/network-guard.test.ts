import type { LookupAddress } from 'node:dns'
import type { LookupFunction } from 'node:net'
import { describe, expect, it } from 'vitest'
import { isPublicAddress, PrivateAddressError } from '../src/index.js'
import { checkLiteralHost, guardedLookup, guardLookup } from '../src/network-guard.js'

/** What a lookup answered, in the form net.connect receives it. */
type Answer = { error: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family?: number }

function ask(lookup: LookupFunction, hostname: string, all: boolean): Promise<Answer> {
  return new Promise((resolve) =>
    lookup(hostname, { all }, (error, address, family) => resolve({ error, address, family })),
  )
}

/** A resolver that answers every name with `addresses`, for names no DNS here can answer so. */
const answering = (addresses: LookupAddress[]) =>
  guardLookup((_hostname, _options, callback) => callback(null, addresses))

describe('isPublicAddress', () => {
  const notPublic = [
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['::1', 'loopback v6'],
    ['10.1.2.3', 'private 10/8'],
    ['172.16.0.1', 'private 172.16/12'],
    ['172.31.255.255', 'private 172.16/12, last'],
    ['192.168.1.1', 'private 192.168/16'],
    ['169.254.169.254', 'link-local: cloud metadata'],
    ['169.254.1.1', 'link-local'],
    ['fe80::1', 'link-local v6'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456::1', 'unique-local'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'this network 0/8'],
    ['::', 'unspecified v6'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.255', 'carrier-grade NAT, last'],
    ['224.0.0.1', 'multicast'],
    ['ff02::1', 'multicast v6'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'documentation'],
    ['2001:db8::1', 'documentation v6'],
    ['::ffff:127.0.0.1', 'IPv4-mapped loopback'],
    ['::ffff:7f00:1', 'IPv4-mapped loopback, hex'],
    ['::ffff:169.254.169.254', 'IPv4-mapped metadata'],
    ['::ffff:10.0.0.1', 'IPv4-mapped private'],
    ['::127.0.0.1', 'IPv4-compatible (deprecated) loopback'],
    ['64:ff9b::7f00:1', 'NAT64 of loopback'],
    ['64:ff9b::a00:1', 'NAT64 of 10.0.0.1'],
    ['64:ff9b:1::5db8:d822', 'local-use NAT64: cannot tell'],
    ['2002:7f00:1::1', '6to4 of loopback'],
    ['2002:c0a8:101::1', '6to4 of 192.168.1.1'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'Teredo'],
    ['localhost', 'a name, not an address'],
    ['0x7f.1', 'legacy IPv4 spelling'],
    ['', 'empty'],
  ] as const
  it.each(notPublic)('%s is not public (%s)', (address) => {
    expect(isPublicAddress(address)).toBe(false)
  })

  const isPublic = [
    ['93.184.216.34', 'public v4'],
    ['8.8.8.8', 'public v4'],
    ['172.32.0.1', 'just past 172.16/12'],
    ['100.128.0.1', 'just past 100.64/10'],
    ['2606:4700::1', 'public v6'],
    ['::ffff:93.184.216.34', 'IPv4-mapped public'],
    ['64:ff9b::5db8:d822', 'NAT64 (DNS64) of 93.184.216.34'],
    ['2002:5db8:d822::1', '6to4 of 93.184.216.34'],
  ] as const
  it.each(isPublic)('%s is public (%s)', (address) => {
    expect(isPublicAddress(address)).toBe(true)
  })
})

describe('PrivateAddressError', () => {
  it('names the host, the address and its kind, and says which option allows it', () => {
    const error = new PrivateAddressError('metadata.internal', '169.254.169.254')
    expect(error).toMatchObject({
      code: 'ERR_OUTBOX_PRIVATE_ADDRESS',
      host: 'metadata.internal',
      address: '169.254.169.254',
    })
    expect(error.message).toBe(
      'refused to connect to metadata.internal (169.254.169.254, link-local): subscription URLs may only reach public addresses; if this destination is meant to be internal, set the relay option allowPrivateNetworks: true (CLI --allow-private-networks)',
    )
  })
})

describe('guardedLookup', () => {
  it('refuses localhost, which resolves to loopback, in both answer forms', async () => {
    for (const all of [false, true]) {
      const answer = await ask(guardedLookup, 'localhost', all)
      expect(answer.error).toBeInstanceOf(PrivateAddressError)
      expect(answer.error).toMatchObject({ code: 'ERR_OUTBOX_PRIVATE_ADDRESS', host: 'localhost' })
      expect(isPublicAddress((answer.error as PrivateAddressError).address)).toBe(false)
      expect(answer.error!.message).toMatch(
        /^refused to connect to localhost \((127\.0\.0\.1|::1), loopback\)/,
      )
    }
  })

  it('answers a public address as dns.lookup does, one or all', async () => {
    expect(await ask(guardedLookup, '93.184.216.34', false)).toEqual({
      error: null,
      address: '93.184.216.34',
      family: 4,
    })
    expect(await ask(guardedLookup, '2606:4700::1', true)).toEqual({
      error: null,
      address: [{ address: '2606:4700::1', family: 6 }],
      family: undefined,
    })
  })

  it('refuses a name whole when any one of its addresses is not public', async () => {
    const mixed = answering([
      { address: '93.184.216.34', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ])
    for (const all of [false, true]) {
      const answer = await ask(mixed, 'rebind.example', all)
      expect(answer.error).toMatchObject({
        code: 'ERR_OUTBOX_PRIVATE_ADDRESS',
        host: 'rebind.example',
        address: '10.0.0.7',
      })
    }
    const allPublic = answering([
      { address: '93.184.216.34', family: 4 },
      { address: '2606:4700::1', family: 6 },
    ])
    expect(await ask(allPublic, 'public.example', false)).toEqual({
      error: null,
      address: '93.184.216.34',
      family: 4,
    })
    expect((await ask(allPublic, 'public.example', true)).address).toHaveLength(2)
  })

  it('passes a resolver failure on as it is', async () => {
    const failure = Object.assign(new Error('getaddrinfo ENOTFOUND gone.example'), { code: 'ENOTFOUND' })
    const failing = guardLookup((_hostname, _options, callback) => callback(failure, []))
    expect((await ask(failing, 'gone.example', false)).error).toBe(failure)
  })
})

describe('checkLiteralHost', () => {
  it('refuses an IP literal host that is not public, in any spelling the URL parser accepts', () => {
    for (const url of [
      'http://127.0.0.1:8080/hooks',
      'http://2130706433/hooks',
      'http://0x7f.1/hooks',
      'http://[::1]/hooks',
      'http://[::ffff:127.0.0.1]/hooks',
      'https://169.254.169.254/latest/meta-data',
      'http://[fe80::1]/hooks',
    ]) {
      const refusal = checkLiteralHost(new URL(url))
      expect(refusal, url).toBeInstanceOf(PrivateAddressError)
      expect(refusal?.message, url).toMatch(/allowPrivateNetworks: true/)
    }
    expect(checkLiteralHost(new URL('http://[::1]/hooks'))?.message).toMatch(
      /^refused to connect to ::1 \(loopback\):/,
    )
  })

  it('leaves public literals and DNS names to the connection (names: to the guarded lookup)', () => {
    for (const url of [
      'http://93.184.216.34/hooks',
      'https://[2606:4700::1]/hooks',
      'http://localhost:3000/hooks',
    ])
      expect(checkLiteralHost(new URL(url)), url).toBeUndefined()
  })
})
