import pg from 'pg'
import { backoffMs } from './backoff.js'
import type { Logger } from './logger.js'

/**
 * How the relay gets LISTEN/NOTIFY wake-ups: a connection string for a dedicated connection, a function that
 * returns a connected `pg.Client` (you own its settings; the relay ends it on stop), or `false` for polling only.
 * LISTEN needs a session: it does not pass transaction-mode poolers such as PgBouncer in transaction mode — point
 * it at PostgreSQL directly (or a session-mode pool).
 */
export type ListenOption =
  | {
      readonly connectionString: string
      /** How long a connection attempt may take. @defaultValue 10000 ({@link LISTEN_CONNECT_TIMEOUT_MS}) */
      readonly connectTimeoutMs?: number
    }
  | (() => Promise<pg.Client>)
  | false

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
    await this.#connecting
    const client = this.#client
    this.#client = undefined
    await client?.end().catch(() => {})
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return
    let client: pg.Client | undefined
    try {
      if (typeof this.option === 'function') client = await this.option()
      else {
        client = new pg.Client({
          connectionString: this.option.connectionString,
          application_name: 'outbox-relay-listen',
          connectionTimeoutMillis: this.option.connectTimeoutMs ?? LISTEN_CONNECT_TIMEOUT_MS,
          query_timeout: this.option.connectTimeoutMs ?? LISTEN_CONNECT_TIMEOUT_MS,
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
      // Anything committed while we were away sent its NOTIFY to nobody: look now.
      this.wake()
    } catch (error) {
      client?.removeAllListeners()
      client?.on('error', () => {})
      await client?.end().catch(() => {})
      this.#scheduleRetry(error)
    }
  }

  #lost(client: pg.Client, error: unknown): void {
    if (this.#client !== client) return
    this.#client = undefined
    client.removeAllListeners()
    client.on('error', () => {})
    client.end().catch(() => {})
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
