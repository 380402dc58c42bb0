import pg from 'pg'
import { type EmbeddedPostgres, startEmbeddedPostgres } from './embedded-postgres.js'

/** The databases of a demo run: one per service, as in production. */
export interface DemoDatabases {
  /** e.g. `PostgreSQL 18.4, embedded on port 41234`. */
  readonly description: string
  readonly ordersUrl: string
  /** Each subscriber's own database, by the subscriber's name. */
  readonly subscriberUrls: ReadonlyMap<string, string>
  /** Drops the scratch databases, or stops the embedded server and deletes its files. Safe to call twice. */
  close(): Promise<void>
}

const CLOSE_TIMEOUT_MS = 10_000

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms)
  })
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer))
}

/**
 * Whether the server still runs. A Ctrl-C in a terminal reaches every process of the foreground group, the
 * embedded server included, which then shuts itself down; stopping it again would wait for an exit that
 * already happened. Waits until a server that is shutting down has gone (its files are removed when the
 * process exits).
 */
async function stillRunning(url: string): Promise<boolean> {
  const deadline = performance.now() + 5_000
  while (performance.now() < deadline) {
    const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 })
    probe.on('error', () => {})
    try {
      await probe.connect()
      await probe.end()
      return true
    } catch (error) {
      // 57P03: "the database system is shutting down" — gone in a moment; anything else: gone already.
      if ((error as { code?: unknown }).code !== '57P03') return false
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return false
}

/** `url` with its database replaced by `database`. */
function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}

/** Subscriber names become database names: keep them to what needs no quoting. */
const SUBSCRIBER_NAME = /^[a-z][a-z0-9_]{0,30}$/

/**
 * Opens the demo's databases — the orders service's and one for each of `subscribers` — on `DATABASE_URL`
 * when it is set (scratch databases, dropped by `close`), or on an embedded PostgreSQL started here (stopped
 * and deleted by `close`).
 */
export async function openDemoDatabases(
  subscribers: readonly string[],
  databaseUrl = process.env.DATABASE_URL,
): Promise<DemoDatabases> {
  for (const name of subscribers) {
    if (!SUBSCRIBER_NAME.test(name))
      throw new Error(`a subscriber name must match ${SUBSCRIBER_NAME}, got ${name}`)
  }
  const server: EmbeddedPostgres | undefined = databaseUrl ? undefined : await startEmbeddedPostgres()
  const adminUrl = server ? server.url() : (databaseUrl as string)
  const suffix = databaseUrl ? `_${process.pid}` : ''
  const ordersName = `outbox_demo_orders${suffix}`
  const subscriberNames = new Map(subscribers.map((name) => [name, `outbox_demo_${name}${suffix}`]))
  const all = [ordersName, ...subscriberNames.values()]
  const admin = new pg.Client({ connectionString: adminUrl })
  admin.on('error', () => {}) // a server going away fails the next query, which is reported there
  const created: string[] = []
  let closing: Promise<void> | undefined
  const close = () => {
    closing ??= (async () => {
      try {
        // An embedded server goes as a whole; on someone else's server, drop exactly what was created.
        for (const name of server ? [] : created.reverse()) {
          // WITH (FORCE) ends connections a crashed step may have left behind.
          await withTimeout(
            admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
            CLOSE_TIMEOUT_MS,
            `dropping ${name}`,
          )
        }
      } finally {
        await withTimeout(admin.end(), CLOSE_TIMEOUT_MS, 'closing the admin connection').catch(() => {})
        if (server) {
          const running = await stillRunning(adminUrl)
          await withTimeout(server.stop({ running }), CLOSE_TIMEOUT_MS, 'stopping PostgreSQL')
        }
      }
    })()
    return closing
  }
  try {
    await admin.connect()
    const { rows } = await admin.query<{ server_version: string }>('SHOW server_version')
    for (const name of all) {
      await admin.query(`CREATE DATABASE ${name}`)
      created.push(name)
    }
    const version = `PostgreSQL ${rows[0]?.server_version.split(' ')[0]}`
    return {
      description: server
        ? `${version}, embedded on port ${server.port}`
        : `${version} from DATABASE_URL (scratch databases ${all.join(', ')})`,
      ordersUrl: withDatabase(adminUrl, ordersName),
      subscriberUrls: new Map(
        [...subscriberNames].map(([subscriber, name]) => [subscriber, withDatabase(adminUrl, name)]),
      ),
      close,
    }
  } catch (error) {
    await close().catch(() => {})
    throw error
  }
}
