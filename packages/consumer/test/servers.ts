import { createServer, type IncomingMessage, type Server } from 'node:http'
import { connect } from 'node:net'
import { serve } from '@hono/node-server'
import type { OutboxEvent } from '@outbox/protocol'
import express from 'express'
import express4 from 'express4'
import Fastify, { type FastifyRequest } from 'fastify'
import { Hono } from 'hono'
import type { Transaction } from 'kysely'
import { outboxWebhooks } from '../src/fastify.js'
import type { Consumer, Refusal } from '../src/index.js'

/** Every way an application mounts a consumer, each on a real server: the core behaves the same under all. */
export const ADAPTERS = ['express5', 'express4', 'fetch', 'node', 'fastify'] as const
export type AdapterName = (typeof ADAPTERS)[number]

/** What a test mounts: the handler gets the adapter's own request as its third argument, onError as its second. */
export interface Mount {
  readonly handler: (event: OutboxEvent<any>, trx: Transaction<any>, req: any) => unknown
  readonly onError?: (refused: Refusal, req: any) => void
}

/** A server listening on a free loopback port, with the consumer at `/hooks` for every method. */
export interface Running {
  readonly url: string
  readonly port: number
  close(): Promise<void>
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve, reject) => {
    server.closeAllConnections()
    server.close((error) => (error ? reject(error) : resolve()))
  })
}

/** How the test configures the server itself, where the adapter has a Node `http` server under it. */
export interface ServerSettings {
  /**
   * The server's request timeout in ms (`0` turns it off): Node's `server.requestTimeout` under the Node-based
   * adapters, `Fastify({ requestTimeout })` under Fastify. Unset, each server keeps its own default.
   */
  readonly requestTimeout?: number
}

async function listenNode(server: Server, settings: ServerSettings = {}): Promise<Running> {
  if (settings.requestTimeout !== undefined) server.requestTimeout = settings.requestTimeout
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return { url: `http://127.0.0.1:${address.port}`, port: address.port, close: () => closeServer(server) }
}

/**
 * Starts `adapter` with the consumer mounted at `/hooks` for every method (so a GET reaches the consumer's 405,
 * not the framework's 404), the way that framework's users mount it, on a server configured with `settings`.
 */
export async function startServer(
  adapter: AdapterName,
  consumer: Consumer,
  mount: Mount,
  settings: ServerSettings = {},
): Promise<Running> {
  const adapterOptions = mount.onError === undefined ? undefined : { onError: mount.onError }
  switch (adapter) {
    case 'express5': {
      const app = express()
      app.all('/hooks', consumer.dedupe(mount.handler, adapterOptions))
      return listenNode(createServer(app), settings)
    }
    case 'express4': {
      const app = express4()
      app.all('/hooks', consumer.dedupe(mount.handler, adapterOptions) as express4.RequestHandler)
      return listenNode(createServer(app), settings)
    }
    case 'fetch': {
      const app = new Hono()
      const hooks = consumer.fetch(mount.handler, adapterOptions)
      app.all('/hooks', (c) => hooks(c.req.raw))
      const server = await new Promise<Server>((resolve) => {
        const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () =>
          resolve(started as Server),
        )
      })
      if (settings.requestTimeout !== undefined) server.requestTimeout = settings.requestTimeout
      const address = server.address()
      if (address === null || typeof address === 'string') throw new Error('no port')
      return { url: `http://127.0.0.1:${address.port}`, port: address.port, close: () => closeServer(server) }
    }
    case 'node': {
      const hooks = consumer.node(mount.handler, adapterOptions)
      return listenNode(
        createServer((req: IncomingMessage, res) => {
          if (req.url === '/hooks') return hooks(req, res)
          res.writeHead(404).end()
        }),
        settings,
      )
    }
    case 'fastify': {
      const app = Fastify(
        settings.requestTimeout === undefined ? {} : { requestTimeout: settings.requestTimeout },
      )
      await app.register(outboxWebhooks, {
        consumer,
        path: '/hooks',
        handler: mount.handler as (event: any, trx: Transaction<any>, req: FastifyRequest) => unknown,
        ...adapterOptions,
      })
      await app.listen({ port: 0, host: '127.0.0.1' })
      const address = app.server.address()
      if (address === null || typeof address === 'string') throw new Error('no port')
      return {
        url: `http://127.0.0.1:${address.port}`,
        port: address.port,
        close: async () => {
          app.server.closeAllConnections()
          await app.close()
        },
      }
    }
  }
}

/** What a raw TCP client saw: the bytes the server sent and whether the server ended the connection. */
export interface RawExchange {
  /** Everything the server wrote, as text. */
  readonly response: string
  /** The status code of the first response line. */
  readonly status: number
  /**
   * How the server ended the connection: its FIN ('end'), or a reset when the kernel still held bytes the server
   * had not read as it closed. Either way the server closed it; the client never sent the rest.
   */
  readonly ended: 'end' | 'reset'
}

/**
 * Writes `head` and then only `partialBody` on a raw TCP connection, and never the rest: resolves once the server
 * ends the connection. A server that keeps waiting for the rest of the body never resolves it, and the test fails
 * on its timeout — no response or close can come from the client side.
 */
export function sendPartial(port: number, head: string, partialBody: Buffer | string): Promise<RawExchange> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' })
    const chunks: Buffer[] = []
    let ended: 'end' | 'reset' | undefined
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('end', () => {
      ended ??= 'end'
    })
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNRESET' || error.code === 'EPIPE') ended ??= 'reset'
      else reject(error)
    })
    socket.on('close', () => {
      const response = Buffer.concat(chunks).toString('latin1')
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0)
      if (ended === undefined) reject(new Error('the socket closed without an end or a reset'))
      else resolve({ response, status, ended })
    })
    socket.write(head)
    socket.write(partialBody)
  })
}

/** The head of a POST to `/hooks` with these headers (names as given), ending with the blank line. */
export function requestHead(headers: Record<string, string>): string {
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}`)
  return ['POST /hooks HTTP/1.1', 'host: 127.0.0.1', ...lines, '', ''].join('\r\n')
}
