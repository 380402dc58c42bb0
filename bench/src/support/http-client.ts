import { Agent } from 'undici'
// The relay's own request function, below the public API (it is not exported): the baselines then send exactly as
// the relay does, so a comparison measures the delivery strategy, not the client.
import { systemClock } from '../../../packages/producer/src/runtime.js'
import { postWebhook } from '../../../packages/producer/src/webhook-request.js'

/** POSTs JSON and throws on a non-2xx answer, like a webhook publisher that must see success before marking. */
export interface JsonPoster {
  post(url: string, body: string, headers?: Record<string, string>): Promise<number>
  close(): Promise<void>
}

/**
 * The HTTP client every baseline uses: the relay's own sender path (undici's `dispatch` through `postWebhook`) on a
 * keep-alive pool configured like the relay's (same keep-alive, no pipelining, 10 s timeout).
 */
export function createJsonPoster(connections: number): JsonPoster {
  const agent = new Agent({ connections, keepAliveTimeout: 30_000, pipelining: 1 })
  const transport = { dispatcher: agent, timeoutMs: 10_000, clock: systemClock, track: () => () => {} }
  let lastUrl: { text: string; parsed: URL } | undefined
  return {
    async post(url, body, headers = {}) {
      if (lastUrl?.text !== url) lastUrl = { text: url, parsed: new URL(url) }
      const response = await postWebhook(
        transport,
        lastUrl.parsed,
        { 'content-type': 'application/json', ...headers },
        body,
      )
      if (response.kind !== 'answered') {
        throw response.kind === 'network error' ? response.error : new Error(`request ${response.kind}`)
      }
      if (response.status < 200 || response.status >= 300) throw new Error(`HTTP ${response.status}`)
      return response.status
    },
    async close() {
      await agent.close()
    },
  }
}
