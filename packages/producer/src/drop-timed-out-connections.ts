import type pg from 'pg'

/** The message pg gives a query whose `query_timeout` ran out (pg 8). */
const QUERY_READ_TIMEOUT = 'Query read timeout'

function isQueryReadTimeout(error: unknown): boolean {
  return error instanceof Error && error.message === QUERY_READ_TIMEOUT
}

/**
 * Makes a pg pool throw away a connection whose query ran past `query_timeout`, instead of lending it out again.
 *
 * pg's `query_timeout` fails the query but keeps the connection, with the unanswered query still on it. When the
 * server is merely slow that is harmless; when the connection went silent (a network partition, a failover that
 * moved the address, a firewall that forgot the flow) every later query lent that connection waits behind the lost
 * one and times out too, until TCP itself gives up — minutes with keepalive, about fifteen without. With this, the
 * first timeout closes the socket, the pool drops the client, and the next query opens a fresh connection: a relay
 * is back as soon as the network is.
 *
 * Call it once, right after creating the pool (it wraps `query` on every client the pool connects from then on).
 * The `outbox` CLI does this on its own pools.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { dropTimedOutConnections } from '@outbox/producer'
 * const pool = dropTimedOutConnections(
 *   new pg.Pool({ connectionString: process.env.DATABASE_URL, query_timeout: 35_000, statement_timeout: 30_000 }),
 * )
 * // A connection the server or the network cut emits 'error': with no listener, that crashes the process.
 * pool.on('error', () => {}) // an idle one: the pool replaces it
 * pool.on('connect', (client) => client.on('error', () => {})) // one lent out: its query fails instead
 * ```
 */
export function dropTimedOutConnections<P extends pg.Pool>(pool: P): P {
  pool.on('connect', (client) => {
    const query = client.query as (...args: unknown[]) => unknown
    const end = (error: unknown) => {
      // With the lost query still active, end() destroys the socket rather than waiting for a goodbye the server
      // cannot send; the pool sees the client ending and drops it when it comes back.
      if (isQueryReadTimeout(error)) client.end().catch(() => {})
    }
    client.query = function queryWithDeadline(this: unknown, ...args: unknown[]) {
      const callback = args.at(-1)
      if (typeof callback === 'function') {
        args[args.length - 1] = (error: unknown, ...rest: unknown[]) => {
          end(error)
          return (callback as (...values: unknown[]) => unknown)(error, ...rest)
        }
        return query.apply(this, args)
      }
      const result = query.apply(this, args)
      // A branch of its own: the caller still gets (and must handle) the rejection.
      if (result instanceof Promise) result.catch(end)
      return result
    } as typeof client.query
  })
  return pool
}
