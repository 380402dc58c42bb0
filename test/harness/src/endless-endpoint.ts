import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

/** What {@link startEndlessEndpoint} answers every request with. */
export interface EndlessEndpointOptions {
  /** The status line's code. @defaultValue 200 */
  readonly status?: number
  /** The first bytes of the body, e.g. a complete JSON answer that endless filler then follows. @defaultValue '{"status":"applied"}' */
  readonly prefix?: string
  /** The byte repeated after the prefix. @defaultValue ' ' (JSON allows any amount of trailing whitespace) */
  readonly filler?: string
  /** Bytes per write of filler. @defaultValue 4096 */
  readonly chunkBytes?: number
  /**
   * Pause between writes. 0 writes as fast as the socket takes them (a firehose: the kernel's socket buffers then
   * hold bytes the client never read). With a pause, a client reading at loopback speed has read every chunk
   * before the next one is written, so the bytes sent are the bytes it read, give or take the chunk in flight.
   * @defaultValue 0
   */
  readonly intervalMs?: number
}

/** One answer the endpoint streamed. */
export interface EndlessAnswer {
  /** Body bytes (prefix and filler) the socket accepted before the client closed the connection. */
  bodyBytesSent: number
  /** The client closed the connection (the answer never ends on its own). */
  closed: boolean
  /** The connection it went out on: the same number for two answers means the client reused the socket. */
  readonly connection: number
}

/** A loopback HTTP endpoint that answers every POST with a status and then a body that never ends. */
export interface EndlessEndpoint {
  readonly url: string
  /** Every answer so far, in arrival order. */
  readonly answers: readonly EndlessAnswer[]
  /** TCP connections accepted so far. */
  readonly connections: () => number
  close(): Promise<void>
}

/**
 * Starts an endpoint on 127.0.0.1 that answers every request with `status` and streams an endless body — a hostile
 * or broken subscriber — and counts, per answer, the body bytes its socket managed to write before the client hung
 * up: the cost of one attempt, measured where the client cannot misreport it.
 */
export async function startEndlessEndpoint(options: EndlessEndpointOptions = {}): Promise<EndlessEndpoint> {
  const status = options.status ?? 200
  const prefix = Buffer.from(options.prefix ?? '{"status":"applied"}')
  const chunk = Buffer.alloc(options.chunkBytes ?? 4096, options.filler ?? ' ')
  const intervalMs = options.intervalMs ?? 0
  const answers: EndlessAnswer[] = []
  const sockets = new Set<Socket>()
  const connectionIds = new WeakMap<Socket, number>()
  let connections = 0

  const stream = async (response: ServerResponse, answer: EndlessAnswer) => {
    const write = (bytes: Buffer) =>
      new Promise<boolean>((resolve) => {
        // Counted once the socket took them (the callback), never for a write that failed on a closed socket.
        const flushed = response.write(bytes, (error) => {
          if (!error) answer.bodyBytesSent += bytes.length
        })
        if (flushed) resolve(true)
        else {
          const done = () => {
            response.off('drain', done)
            response.off('close', done)
            resolve(!response.destroyed)
          }
          response.on('drain', done)
          response.on('close', done)
        }
      })
    if (!(await write(prefix))) return
    while (!answer.closed && !response.destroyed) {
      if (!(await write(chunk))) return
      if (intervalMs > 0) await new Promise((resolve) => setTimeout(resolve, intervalMs))
      // A firehose still gives the client's close a turn of the event loop to arrive.
      else await new Promise((resolve) => setImmediate(resolve))
    }
  }

  const server = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      const answer: EndlessAnswer = {
        bodyBytesSent: 0,
        closed: false,
        connection: connectionIds.get(request.socket) ?? 0,
      }
      answers.push(answer)
      response.on('close', () => {
        answer.closed = true
      })
      response.writeHead(status, { 'content-type': 'application/json' })
      void stream(response, answer)
    })
  })
  server.on('connection', (socket) => {
    connections += 1
    connectionIds.set(socket, connections)
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    answers,
    connections: () => connections,
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
