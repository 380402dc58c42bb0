import pg from 'pg'
import { consoleLogger, isLogger, type Logger, safeLog } from './logger.js'

/**
 * Marks a guarded pool. `Symbol.for`, so two copies of this package in one process (a monorepo, a bundler) agree
 * that a pool is guarded.
 */
const GUARDED = Symbol.for('@outbox/consumer.guardedPool')

/**
 * How many pools this process guarded, kept on `globalThis` under a `Symbol.for` key for the same reason: every
 * copy of the package counts into one number. `createConsumer` reads it (see {@link guardedPoolCount}).
 */
const COUNT = Symbol.for('@outbox/consumer.guardedPoolCount')

/**
 * How many pools {@link guardPool} has guarded in this process, by any copy of this package. Kysely keeps its
 * dialect's pool private, so `createConsumer` cannot look at the pool behind `db`; but when the process has
 * guarded none at all, the pool behind a PostgreSQL `db` cannot be guarded, and it says so.
 */
export function guardedPoolCount(): number {
  return ((globalThis as { [COUNT]?: number })[COUNT] as number | undefined) ?? 0
}

/** What {@link guardPool} needs of a pool: pg's `Pool`, or anything with its `'error'` and `'connect'` events. */
export interface GuardablePool {
  on(event: 'error', listener: (error: Error, client: unknown) => void): unknown
  on(
    event: 'connect',
    listener: (client: { on(event: 'error', listener: (error: Error) => void): unknown }) => void,
  ): unknown
}

/**
 * Makes a `pg.Pool` survive PostgreSQL ending its connections (a restart, a failover, `pg_terminate_backend`, an
 * idle timeout on a proxy): without this, such a cut can crash the whole process. Returns the same pool; calling it
 * again on a guarded pool does nothing.
 *
 * Why it is needed: `pg` reports a lost connection as an `'error'` EVENT — on the pool for an idle client, on the
 * client itself for one that is checked out (the pool removes its own listener while it lends a client, e.g. to a
 * webhook's transaction). Node turns an `'error'` event nobody listens to into an uncaught exception, so one
 * database restart while a handler runs kills every consumer process instead of failing one delivery. With both
 * listeners the query in progress fails — the delivery is rolled back and answered 500, and the sender retries —
 * the broken connection is discarded, and the next query opens a fresh one. Each cut is logged once at `warn`.
 *
 * It adds `pool.on('error', …)` and `pool.on('connect', (client) => client.on('error', …))`. Clients the pool
 * already opened get the client listener too, so a pool can be guarded after it has been used.
 *
 * `createConsumer` cannot look at the pool behind `db` (Kysely keeps its `PostgresDialect`'s pool private); it warns
 * when a PostgreSQL `db` is created in a process that has guarded no pool at all, the one case it can tell. Guard
 * every pool behind a consumer with this (or create it with {@link createPool}); a pool you guard with your own two
 * listeners, pass through this too, so the consumer knows.
 *
 * @param logger where each lost connection is reported. @defaultValue warn/error to the console
 *
 * @example
 * ```ts
 * import { createConsumer, guardPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 * import pg from 'pg'
 *
 * const pool = guardPool(new pg.Pool({ connectionString: process.env.DATABASE_URL }))
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * ```
 */
export function guardPool<P extends GuardablePool>(pool: P, logger: Logger = consoleLogger): P {
  if (typeof pool !== 'object' || pool === null || typeof (pool as { on?: unknown }).on !== 'function') {
    throw new TypeError('guardPool: pass a pg.Pool, e.g. guardPool(new pg.Pool({ connectionString }))')
  }
  if (!isLogger(logger)) {
    throw new TypeError(
      'guardPool: `logger` must have debug, info, warn and error methods (pino fits directly)',
    )
  }
  if (isGuardedPool(pool)) return pool
  // One cut is reported once. An idle client's cut reaches both listeners with the same error (the pool re-emits
  // it); a checked-out client may emit two errors for one cut (the server's FATAL message, then "Connection
  // terminated unexpectedly" when the socket closes): so both the error and the client are remembered.
  const reported = new WeakSet<object>()
  const seen = (thing: unknown): boolean => {
    if (typeof thing !== 'object' || thing === null) return false
    if (reported.has(thing)) return true
    reported.add(thing)
    return false
  }
  const report = (where: 'idle' | 'checked out', error: Error, client: unknown) => {
    const already = seen(error)
    if (seen(client) || already) return
    const { message, code } = error as { message?: unknown; code?: unknown }
    safeLog(
      logger,
      'warn',
      { error: { message, ...(code === undefined ? {} : { code }) }, connection: where },
      'a PostgreSQL connection was lost; its query fails and the pool opens a new connection',
    )
  }
  const guardClient = (client: { on(event: 'error', listener: (error: Error) => void): unknown }) => {
    client.on('error', (error) => report('checked out', error, client))
  }
  pool.on('error', (error, client) => report('idle', error, client))
  pool.on('connect', guardClient)
  // Clients opened before the guard (pg-pool keeps them in `_clients`): the 'connect' listener never sees them.
  const opened = (pool as { _clients?: unknown })._clients
  if (Array.isArray(opened)) {
    for (const client of opened) {
      if (typeof client?.on === 'function') guardClient(client)
    }
  }
  Object.defineProperty(pool, GUARDED, { value: true, enumerable: false })
  ;(globalThis as { [COUNT]?: number })[COUNT] = guardedPoolCount() + 1
  return pool
}

/**
 * Whether {@link guardPool} (or {@link createPool}) guarded this pool.
 *
 * @example
 * ```ts
 * import { createPool, isGuardedPool } from '@outbox/consumer'
 * console.log(isGuardedPool(createPool({ connectionString: process.env.DATABASE_URL }))) // true
 * ```
 */
export function isGuardedPool(pool: unknown): boolean {
  return typeof pool === 'object' && pool !== null && (pool as { [GUARDED]?: unknown })[GUARDED] === true
}

/**
 * Creates a `pg.Pool` already guarded by {@link guardPool}: a PostgreSQL connection cut while a handler runs fails
 * that delivery (500, retried by the sender) instead of crashing the process.
 *
 * @param config `pg.Pool`'s own options, passed as they are.
 * @param logger where each lost connection is reported. @defaultValue warn/error to the console
 *
 * @example
 * ```ts
 * import { createConsumer, createPool } from '@outbox/consumer'
 * import { Kysely, PostgresDialect } from 'kysely'
 *
 * const pool = createPool({ connectionString: process.env.DATABASE_URL, max: 10 })
 * const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
 * const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
 * ```
 */
export function createPool(config?: pg.PoolConfig, logger?: Logger): pg.Pool {
  return guardPool(new pg.Pool(config), logger)
}
