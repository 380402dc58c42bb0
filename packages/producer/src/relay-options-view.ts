import { maskConnectionString, maskUrl } from './mask-url.js'
import type { ResolvedRelayOptions } from './options.js'

/** The relay's options as `relay.options` shows them: no signing or secret keys, and no credential in any URL. */
export type RelayOptionsView = Omit<ResolvedRelayOptions, 'signingKeys' | 'secretKeys'>

/**
 * What `relay.options` returns: the resolved options without the signing keys and the keys secrets are encrypted with, the LISTEN connection string's
 * password masked, and the endpoint's URLs with their user-info and query masked. Options get logged, printed in
 * debugging sessions and attached to error reports; the relay keeps the real values for itself.
 */
export function relayOptionsView(options: ResolvedRelayOptions): RelayOptionsView {
  const { signingKeys: _keys, secretKeys: _secretKeys, ...rest } = options
  const { endpoint, listen } = rest
  return Object.freeze({
    ...rest,
    endpoint:
      endpoint === undefined
        ? undefined
        : (event: Parameters<typeof endpoint>[0]) => maskUrl(endpoint(event)),
    listen:
      typeof listen === 'object' && listen !== null && 'connectionString' in listen
        ? Object.freeze({ ...listen, connectionString: maskConnectionString(listen.connectionString) })
        : listen,
  })
}
