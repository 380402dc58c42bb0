import { Agent, request } from 'undici'

/** POSTs JSON and throws on a non-2xx answer, like a webhook publisher that must see success before marking. */
export interface JsonPoster {
  post(url: string, body: string, headers?: Record<string, string>): Promise<number>
  close(): Promise<void>
}

/**
 * The HTTP client every baseline uses: undici's request API on a keep-alive pool, configured like the relay's own
 * sender (same keep-alive, no pipelining), so a comparison measures the delivery strategy, not the client.
 */
export function createJsonPoster(connections: number): JsonPoster {
  const agent = new Agent({ connections, keepAliveTimeout: 30_000, pipelining: 1 })
  return {
    async post(url, body, headers = {}) {
      const response = await request(url, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json', ...headers },
        dispatcher: agent,
        signal: AbortSignal.timeout(10_000),
      })
      await response.body.text()
      if (response.statusCode < 200 || response.statusCode >= 300) {
        throw new Error(`HTTP ${response.statusCode}`)
      }
      return response.statusCode
    },
    async close() {
      await agent.close()
    },
  }
}
