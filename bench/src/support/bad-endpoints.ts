import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

/**
 * What the bad endpoints do: accept the connection and never answer; answer 500 at once; or answer 200 and then
 * stream a body that never ends.
 */
export type Badness = 'hang' | '500' | 'endless'

/** Endless bodies are written in chunks of this size, one every {@link ENDLESS_PACE_MS}. */
const ENDLESS_CHUNK = Buffer.alloc(64 * 1024, 'x')
const ENDLESS_PACE_MS = 10

/** Loopback endpoints that misbehave (see {@link startBadEndpoints}). */
export interface BadEndpoints {
  readonly urls: readonly string[]
  /** Requests they received. */
  requests(): number
  /** Bytes they wrote, counted as their connections close (all of them, once closed). */
  bytesSent(): number
  close(): Promise<void>
}

/** `count` loopback endpoints, each its own server (another customer's host), that behave as `badness` says. */
export async function startBadEndpoints(count: number, badness: Badness): Promise<BadEndpoints> {
  const servers: Server[] = []
  const sockets = new Set<Socket>()
  let requests = 0
  let bytesSent = 0
  for (let n = 0; n < count; n++) {
    const server = createServer((req: IncomingMessage, res) => {
      requests += 1
      req.resume()
      if (badness === '500') req.on('end', () => res.writeHead(500).end('{"title":"down"}'))
      if (badness === 'endless') {
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json' })
          res.write('{"status":"applied","padding":"')
          // A chunk every few milliseconds, for ever: endless, at a pace a remote host sends (6.4 MB/s). Poured as fast
          // as loopback takes it, the bytes it leaves in the kernel's socket buffers (megabytes per request) cost this
          // machine's two cores, which the relay under test shares; a remote endpoint's pouring costs only its host.
          const pour = () => {
            if (res.destroyed) return
            res.write(ENDLESS_CHUNK)
            setTimeout(pour, ENDLESS_PACE_MS)
          }
          pour()
        })
      }
      // A hanging endpoint reads the request and never answers.
    })
    server.on('connection', (socket) => {
      sockets.add(socket)
      socket.on('close', () => {
        sockets.delete(socket)
        bytesSent += socket.bytesWritten
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    servers.push(server)
  }
  return {
    urls: servers.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`),
    requests: () => requests,
    /** Bytes the endpoints wrote, counted as their connections close (all of them, once closed). */
    bytesSent: () => bytesSent,
    async close() {
      // Each socket's bytes are counted by its 'close' listener, which fires before the servers report closed.
      for (const socket of sockets) socket.destroy()
      await Promise.all(
        servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
      )
    },
  }
}
