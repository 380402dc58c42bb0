import pg from 'pg'
import { backoffMs } from './backoff.js'
import type { Logger } from './logger.js'

/**
 * How the relay gets LISTEN/NOTIFY wake-ups: a connection string for a dedicated connection, a function that
 * returns a connected `pg.Client` (you own its settings; the relay ends it on stop, and heartbeats it with the
 * default {@link LISTEN_HEARTBEAT_INTERVAL_MS} and {@link LISTEN_HEARTBEAT_TIMEOUT_MS}), or `false` for polling
 * only. LISTEN needs a session: it does not pass transaction-mode poolers such as PgBouncer in transaction mode —
 * point it at PostgreSQL directly (or a session-mode pool).
 */
export type ListenOption =
  | ({
      readonly connectionString: string
      /** How long a connection attempt may take. @defaultValue 10000 ({@link LISTEN_CONNECT_TIMEOUT_MS}) */
      readonly connectTimeoutMs?: number
    } & ListenHeartbeat)
  | ({
      /**
       * Returns a connected `pg.Client` (you own its settings; the relay ends it on stop): the function form with a
       * heartbeat of your own, and no connection string in `relay.options`.
       */
      readonly connect: () => Promise<pg.Client>
    } & ListenHeartbeat)
  | (() => Promise<pg.Client>)
  | false

/** The heartbeat of the LISTEN connection (see {@link LISTEN_HEARTBEAT_INTERVAL_MS}). */
export interface ListenHeartbeat {
  /**
   * How often the idle LISTEN connection is asked `SELECT 1`, so a connection that went silent is noticed and
   * replaced; `0` turns the heartbeat off. @defaultValue 15000 ({@link LISTEN_HEARTBEAT_INTERVAL_MS})
   */
  readonly heartbeatIntervalMs?: number
  /** How long a heartbeat may wait for its answer. @defaultValue 5000 ({@link LISTEN_HEARTBEAT_TIMEOUT_MS}) */
  readonly heartbeatTimeoutMs?: number
}

/** First reconnect delay after the LISTEN connection is lost; doubles up to {@link LISTEN_MAX_BACKOFF_MS}, ±50%. */
export const LISTEN_MIN_BACKOFF_MS = 100
/** Longest wait between LISTEN reconnect attempts. */
export const LISTEN_MAX_BACKOFF_MS = 30_000
/**
 * How long connecting the LISTEN connection (and its LISTEN command) may take before the try counts as failed:
 * a host that accepts TCP and never answers must not hang `start()` — the relay polls meanwhile and retries.
 */
export const LISTEN_CONNECT_TIMEOUT_MS = 10_000
/**
 * How often the relay checks its idle LISTEN connection. A connection that went silent (a network partition, a
 * failover that moved the address) raises no error: without a heartbeat wake-ups would stop without a word until
 * TCP gives up, minutes later, and the relay would fall back to its poll interval unannounced. A `SELECT 1` every
 * 15 s costs nothing, and keeps NAT and firewall idle timers (often a few minutes) from forgetting the flow.
 */
export const LISTEN_HEARTBEAT_INTERVAL_MS = 15_000
/** How long a heartbeat may wait for its answer before the LISTEN connection is called lost and replaced. */
export const LISTEN_HEARTBEAT_TIMEOUT_MS = 5_000
/** How long ending a LISTEN connection may take before its socket is destroyed: a silent server never says goodbye. */
const END_TIMEOUT_MS = 1_000

/**
 * Ends a client politely (Terminate, then wait for the server to close) but never for longer than `ms`: on a silent
 * connection the server's close never comes, and waiting would hang the relay's stop.
 */
async function endWithin(client: pg.Client, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), ms)
  })
  const outcome = await Promise.race([
    client.end().then(
      () => 'ended' as const,
      () => 'ended' as const,
    ),
    late,
  ])
  clearTimeout(timer)
  if (outcome === 'late') client.connection.stream.destroy()
}

/**
 * Keeps one LISTEN connection open and calls `wake` on every notification. When the connection is lost it says
 * so, wakes the relay once (polling carries on meanwhile and notifications may have been missed) and reconnects
 * with capped, jittered backoff. Never throws into the relay.
 */
export class Listener {
  #client: pg.Client | undefined
  #stopped = false
  #failures = 0
  #retry: NodeJS.Timeout | undefined
  #connecting: Promise<void> | undefined
  #heartbeat: NodeJS.Timeout | undefined

  constructor(
    private readonly option: Exclude<ListenOption, false>,
    private readonly channel: string,
    private readonly wake: () => void,
    private readonly logger: Logger,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** True while the LISTEN connection is up. */
  get connected(): boolean {
    return this.#client !== undefined
  }

  /** Connects (or schedules a retry); resolves after the first try either way. */
  start(): Promise<void> {
    this.#connecting = this.#connect()
    return this.#connecting
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#retry)
    clearTimeout(this.#heartbeat)
    await this.#connecting
    const client = this.#client
    this.#client = undefined
    if (client) await endWithin(client, END_TIMEOUT_MS)
  }

  /**
   * Asks the idle connection `SELECT 1` every interval. No answer within the timeout (or an error) means the
   * connection is lost, even if its socket looks open: it is destroyed and replaced like a connection that dropped.
   */
  #scheduleHeartbeat(client: pg.Client): void {
    const intervalMs = this.#heartbeatOption('heartbeatIntervalMs', LISTEN_HEARTBEAT_INTERVAL_MS)
    if (intervalMs === 0) return
    const timeoutMs = this.#heartbeatOption('heartbeatTimeoutMs', LISTEN_HEARTBEAT_TIMEOUT_MS)
    this.#heartbeat = setTimeout(async () => {
      if (this.#client !== client) return
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`LISTEN connection heartbeat got no answer within ${timeoutMs} ms`)),
          timeoutMs,
        )
      })
      try {
        await Promise.race([client.query('SELECT 1'), late])
      } catch (error) {
        this.#lost(client, error)
        return
      } finally {
        clearTimeout(timer)
      }
      this.#scheduleHeartbeat(client)
    }, intervalMs)
  }

  #heartbeatOption(name: 'heartbeatIntervalMs' | 'heartbeatTimeoutMs', fallback: number): number {
    return typeof this.option === 'function' ? fallback : (this.option[name] ?? fallback)
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return
    let client: pg.Client | undefined
    try {
      if (typeof this.option === 'function') client = await this.option()
      else if ('connect' in this.option) client = await this.option.connect()
      else {
        client = new pg.Client({
          connectionString: this.option.connectionString,
          application_name: 'outbox-relay-listen',
          connectionTimeoutMillis: this.option.connectTimeoutMs ?? LISTEN_CONNECT_TIMEOUT_MS,
          query_timeout: this.option.connectTimeoutMs ?? LISTEN_CONNECT_TIMEOUT_MS,
          // A backstop for the heartbeat (which it does not replace: Node cannot set the probe interval, so the
          // kernel's 75 s × 9 probes apply); it also keeps the idle flow alive through NAT and firewalls.
          keepAlive: true,
        })
        await client.connect()
      }
      client.on('error', (error) => this.#lost(client!, error))
      client.on('end', () => this.#lost(client!, new Error('LISTEN connection ended')))
      client.on('notification', () => this.wake())
      await client.query(`LISTEN "${this.channel}"`)
      if (this.#stopped) {
        await client.end().catch(() => {})
        return
      }
      this.#client = client
      if (this.#failures > 0)
        this.logger.info({ channel: this.channel }, 'LISTEN connection restored; wake-ups are back')
      this.#failures = 0
      this.#scheduleHeartbeat(client)
      // Anything committed while we were away sent its NOTIFY to nobody: look now.
      this.wake()
    } catch (error) {
      client?.removeAllListeners()
      client?.on('error', () => {})
      if (client) await endWithin(client, END_TIMEOUT_MS)
      this.#scheduleRetry(error)
    }
  }

  #lost(client: pg.Client, error: unknown): void {
    if (this.#client !== client) return
    this.#client = undefined
    clearTimeout(this.#heartbeat)
    client.removeAllListeners()
    client.on('error', () => {})
    void endWithin(client, END_TIMEOUT_MS)
    if (this.#stopped) return
    this.wake()
    this.#scheduleRetry(error)
  }

  #scheduleRetry(error: unknown): void {
    if (this.#stopped) return
    this.#failures += 1
    const delay = backoffMs(this.#failures - 1, {
      baseMs: LISTEN_MIN_BACKOFF_MS,
      maxMs: LISTEN_MAX_BACKOFF_MS,
      jitter: 0.5,
    })
    this.logger.warn(
      { channel: this.channel, err: error, retryInMs: delay },
      'LISTEN connection lost; polling until it is back',
    )
    this.onError(error)
    this.#retry = setTimeout(() => {
      this.#connecting = this.#connect()
    }, delay)
  }
}
