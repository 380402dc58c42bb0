import { createServer, type RequestListener } from 'node:http'
import type { AddressInfo } from 'node:net'

/** An HTTP server that is listening; {@link Served.close} stops it gracefully. */
export interface Served {
  /** `http://host:port`, without a trailing slash. */
  readonly url: string
  readonly port: number
  /**
   * Stops accepting connections, lets requests in progress finish (a webhook being applied commits and is
   * answered), then ends every connection once `graceMs` has passed. Safe to call twice.
   */
  close(graceMs?: number): Promise<void>
}

/** Listens on `host:port` (port 0: any free port) with `app`, an Express app or any request listener. */
export async function serve(app: RequestListener, port: number, host = '127.0.0.1'): Promise<Served> {
  const server = createServer(app)
  // Keep-alive sockets outlive their requests; a relay reuses them for the next webhook.
  server.keepAliveTimeout = 30_000
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  let closing: Promise<void> | undefined
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    close(graceMs = 5_000) {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), graceMs)
        server.close(() => {
          clearTimeout(force)
          resolve()
        })
        // Idle keep-alive connections would otherwise hold close() open until they time out.
        server.closeIdleConnections()
      })
      return closing
    },
  }
}
