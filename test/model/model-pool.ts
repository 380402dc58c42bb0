import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'

/**
 * A relay's own connection pool, as a process has: it counts the queries in flight (so the model can tell a relay
 * at work from one waiting on a lock or on the network) and can be killed — every query in flight is cut by the
 * server (`pg_terminate_backend`) and no new connection is ever handed out, as when the relay's process dies.
 */
export class ModelPool {
  readonly #pool: pg.Pool
  readonly applicationName: string
  #killed = false
  #inFlight = 0

  constructor(url: string, applicationName: string, max = 4) {
    this.applicationName = applicationName
    this.#pool = new pg.Pool({ connectionString: url, application_name: applicationName, max })
    this.#pool.on('error', () => {})
    this.#pool.on('connect', (client) => client.on('error', () => {}))
  }

  /** Queries sent and not yet answered. */
  get inFlight(): number {
    return this.#inFlight
  }

  /** A Kysely instance on this pool, for the relay. */
  kysely(): Kysely<any> {
    const pool = {
      connect: async () => {
        if (this.#killed) throw new Error('the relay process is dead')
        const client = await this.#pool.connect()
        if (this.#killed) {
          client.release(true)
          throw new Error('the relay process is dead')
        }
        const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>
        const counted = (...args: unknown[]) => {
          if (this.#killed) return Promise.reject(new Error('the relay process is dead'))
          this.#inFlight += 1
          return query(...args).finally(() => {
            this.#inFlight -= 1
          })
        }
        return new Proxy(client, {
          get: (target, property, receiver) =>
            property === 'query' ? counted : Reflect.get(target, property, receiver),
        })
      },
      end: () => this.#pool.end(),
    }
    return new Kysely<any>({ dialect: new PostgresDialect({ pool: pool as unknown as pg.Pool }) })
  }

  /**
   * Kills the "process": no new query starts, and the server cuts the ones running. Only in this database: another
   * model run on the same server (another test file, another checkout) names its pools alike, and a crash here
   * must not cut its relays.
   */
  async kill(admin: Kysely<any>): Promise<void> {
    this.#killed = true
    await sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE application_name = ${this.applicationName} AND datname = current_database()`.execute(admin)
  }

  async end(): Promise<void> {
    this.#killed = true
    await this.#pool.end().catch(() => {})
  }
}
