import { once } from 'node:events'
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net'

/**
 * What the proxy does with traffic:
 * - `forward`: new connections are passed on to the target (connections silenced earlier stay silent: see
 *   {@link TcpFaultProxy.blackhole});
 * - `blackhole`: nothing is forwarded in either direction and nothing is closed or reset — every open connection
 *   and every new one goes silent, the half-dead connection of a network partition;
 * - `reset`: open connections are destroyed with a TCP RST, new ones are reset as soon as they arrive;
 * - `refuse`: the port is closed, so a connect fails at once (ECONNREFUSED); open connections carry on.
 */
export type TcpFaultMode = 'forward' | 'blackhole' | 'reset' | 'refuse'

/** What went through the proxy. */
export interface TcpFaultCounts {
  /** Connections accepted, ever. */
  readonly accepted: number
  /** Connections open now (silent ones included). */
  readonly open: number
  /** Connections silenced by a blackhole, ever. */
  readonly silenced: number
  /** Connections reset, ever. */
  readonly reset: number
  /** Bytes forwarded client → target. */
  readonly bytesUp: number
  /** Bytes forwarded target → client. */
  readonly bytesDown: number
  /** Bytes that arrived on silent connections and went nowhere. */
  readonly bytesDropped: number
}

interface Pair {
  readonly client: Socket
  upstream: Socket | undefined
  silent: boolean
}

/**
 * A loopback TCP proxy in front of a server (PostgreSQL here) that can stop forwarding without telling anyone.
 *
 * A database restart closes connections, and pg notices at once; a partition, a failover that moved the address or
 * a firewall that dropped its state does not: the socket stays open and nothing ever arrives. Only deadlines notice
 * that, which is what this proxy is for. A silenced connection never forwards again, even after {@link forward}:
 * its bytes were dropped, and TCP never delivers a stream with a hole in it — it is the connection whose far end gave
 * up during the partition, which only the client can end. Its server side is left open too (the server never learns
 * either): a transaction it held stays open until the server's own `idle_in_transaction_session_timeout` ends it.
 *
 * No dependency: `node:net` only. Loopback cannot show TCP keepalive (the kernel answers the probes of a socket
 * whose peer is alive), so keepalive is documented, not tested, here.
 */
export class TcpFaultProxy {
  #mode: TcpFaultMode = 'forward'
  #server: Server
  readonly #pairs = new Set<Pair>()
  readonly #counts = {
    accepted: 0,
    silenced: 0,
    reset: 0,
    bytesUp: 0,
    bytesDown: 0,
    bytesDropped: 0,
  }

  private constructor(
    readonly targetHost: string,
    readonly targetPort: number,
    /** The proxy's own port on 127.0.0.1 (kept across `refuse`). */
    readonly port: number,
    server: Server,
  ) {
    this.#server = server
  }

  /** Starts a proxy on a free port of 127.0.0.1 in front of `target`, forwarding. */
  static async start(target: { host: string; port: number }): Promise<TcpFaultProxy> {
    const server = TcpFaultProxy.#listenOn(0)
    await once(server, 'listening')
    const { port } = server.address() as { port: number }
    const proxy = new TcpFaultProxy(target.host, target.port, port, server)
    proxy.#attach(server)
    return proxy
  }

  /** A proxy in front of the server a `postgres://` URL names; {@link url} gives the URL through the proxy. */
  static async forUrl(url: string): Promise<TcpFaultProxy> {
    const parsed = new URL(url)
    return TcpFaultProxy.start({ host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || 5432) })
  }

  static #listenOn(port: number): Server {
    // allowHalfOpen: a client's FIN is not answered by Node on its own — a silent connection must not answer it.
    const server = createServer({ allowHalfOpen: true })
    server.listen(port, '127.0.0.1')
    return server
  }

  /** `url` with its host and port replaced by the proxy's. */
  url(url: string): string {
    const parsed = new URL(url)
    parsed.hostname = '127.0.0.1'
    parsed.port = String(this.port)
    return parsed.toString()
  }

  get mode(): TcpFaultMode {
    return this.#mode
  }

  /** A snapshot of the counters. */
  counts(): TcpFaultCounts {
    return { ...this.#counts, open: this.#pairs.size }
  }

  /** Forwards new connections again (and reopens the port after `refuse`). */
  async forward(): Promise<void> {
    await this.#reopen()
    this.#mode = 'forward'
  }

  /** Silences every open connection and every new one: no byte passes, no FIN, no RST. */
  async blackhole(): Promise<void> {
    await this.#reopen()
    this.#mode = 'blackhole'
    for (const pair of this.#pairs) this.#silence(pair)
  }

  /** Resets every open connection (RST to the client, the target's side closed) and every new one. */
  async reset(): Promise<void> {
    await this.#reopen()
    this.#mode = 'reset'
    for (const pair of [...this.#pairs]) this.#reset(pair)
  }

  /** Closes the port: new connections are refused; open ones are left as they are. */
  async refuse(): Promise<void> {
    this.#mode = 'refuse'
    // The listening socket closes at once; the server's 'close' waits for open connections, which carry on.
    if (this.#server.listening) this.#server.close()
  }

  /** Closes the port and every connection (silent ones too). */
  async close(): Promise<void> {
    await this.refuse()
    for (const pair of this.#pairs) {
      pair.client.destroy()
      pair.upstream?.destroy()
    }
    this.#pairs.clear()
  }

  async #reopen(): Promise<void> {
    if (this.#server.listening) return
    const server = TcpFaultProxy.#listenOn(this.port)
    await once(server, 'listening')
    this.#server = server
    this.#attach(server)
  }

  #attach(server: Server): void {
    server.on('connection', (client) => this.#accept(client))
  }

  #accept(client: Socket): void {
    this.#counts.accepted += 1
    const pair: Pair = { client, upstream: undefined, silent: false }
    this.#pairs.add(pair)
    client.on('error', () => {})
    client.on('close', () => this.#forget(pair))
    if (this.#mode === 'reset') {
      this.#reset(pair)
      return
    }
    if (this.#mode === 'blackhole') {
      this.#silence(pair)
      return
    }
    const upstream = tcpConnect({ host: this.targetHost, port: this.targetPort, allowHalfOpen: true })
    pair.upstream = upstream
    upstream.on('error', () => {})
    this.#pipe(pair, client, upstream, 'bytesUp')
    this.#pipe(pair, upstream, client, 'bytesDown')
    upstream.on('close', () => {
      if (!pair.silent) client.destroy()
    })
  }

  /** Copies `from` → `to` while the pair is not silent, with backpressure; ends pass on too. */
  #pipe(pair: Pair, from: Socket, to: Socket, counter: 'bytesUp' | 'bytesDown'): void {
    from.on('data', (chunk: Buffer) => {
      if (pair.silent) {
        this.#counts.bytesDropped += chunk.length
        return
      }
      this.#counts[counter] += chunk.length
      if (!to.write(chunk)) {
        from.pause()
        to.once('drain', () => from.resume())
      }
    })
    from.on('end', () => {
      if (!pair.silent) to.end()
    })
  }

  #silence(pair: Pair): void {
    if (pair.silent) return
    pair.silent = true
    this.#counts.silenced += 1
    // Keep reading (and dropping): a paused socket would be a different fault, a full receive window.
    pair.client.resume()
    pair.upstream?.resume()
  }

  #reset(pair: Pair): void {
    this.#counts.reset += 1
    pair.client.resetAndDestroy()
    pair.upstream?.destroy()
    this.#pairs.delete(pair)
  }

  #forget(pair: Pair): void {
    // A silent pair's server side stays open after its client left: the server never learns of a partition.
    if (!pair.silent) {
      pair.upstream?.destroy()
      this.#pairs.delete(pair)
    }
  }
}
