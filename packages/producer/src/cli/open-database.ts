import type { Kysely } from 'kysely'
import type { ClientConfig } from 'pg'
import type { OutboxError } from '../errors.js'
import { CliError, UsageError } from './cli-error.js'
import { explainDatabaseError } from './describe-error.js'
import { loadProducer } from './load-producer.js'
import {
  type PoolDeadlines,
  type PoolProfile,
  poolSettings,
  profileOf,
  resolvePoolDeadlines,
} from './pool-settings.js'

/** The database a command works on, checked before any connection is attempted. */
export interface DatabaseTarget {
  /** The connection string as given (it may hold a password: never print it). */
  readonly url: string
  /** `host:port` of the server, for messages. */
  readonly where: string
  readonly user: string
  readonly database: string
  /** Schema of the producer tables (checked by {@link withDatabase}, with the library's rule). */
  readonly schema: string
  /** Where the schema name came from, for messages. */
  readonly schemaSource: '--schema' | 'OUTBOX_SCHEMA' | 'default'
  /** The connections' deadlines per kind of command (defaults and `OUTBOX_DB_*` overrides, checked up front). */
  readonly deadlines: Readonly<Record<PoolProfile, PoolDeadlines>>
}

function fromEnv(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim()
  return value ? value : undefined
}

/** Where a command's refusal of a password in `--database-url` says the password goes instead (pg reads
 * PGPASSWORD when the URL has none, so it can stay out of the URL as well). */
const PASSWORD_ELSEWHERE =
  'put the URL in DATABASE_URL instead, or leave the password out of it and set PGPASSWORD'

/**
 * Resolves `--database-url`/`DATABASE_URL` and `--schema`/`OUTBOX_SCHEMA` (flags win) and checks the URL, so a
 * typo is reported as a usage error instead of surfacing later as a confusing connection failure. A password in
 * `--database-url` is refused, in every command: `ps` shows every process's arguments to every user of the machine,
 * for as long as the command runs. `passwordElsewhere` says where it goes instead (the relay also reads the URL
 * from a file).
 */
export function resolveDatabase(
  flags: { readonly 'database-url'?: string | undefined; readonly schema?: string | undefined },
  env: NodeJS.ProcessEnv,
  passwordElsewhere = PASSWORD_ELSEWHERE,
): DatabaseTarget {
  const fromFlag = flags['database-url']?.trim()
  const url = fromFlag || fromEnv(env, 'DATABASE_URL')
  const source = fromFlag ? '--database-url' : 'DATABASE_URL'
  if (!url) {
    throw new UsageError(
      'no database: set DATABASE_URL or pass --database-url (e.g. postgres://user:password@host:5432/dbname)',
    )
  }
  let parsed: URL
  try {
    parsed = new URL(url)
    // pg decodes these parts itself and throws a bare URIError on a stray "%": check them now.
    decodeURIComponent(parsed.username)
    decodeURIComponent(parsed.password)
    decodeURIComponent(parsed.pathname)
  } catch {
    // The value is not echoed: a malformed URL may still contain a password.
    throw new UsageError(
      `${source} is not a valid URL; expected postgres://user:password@host:5432/dbname (percent-encode special characters in the password)`,
    )
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new UsageError(
      `${source} must start with postgres:// or postgresql://, got ${parsed.protocol}// (e.g. postgres://user:password@host:5432/dbname)`,
    )
  }
  if (source === '--database-url' && parsed.password !== '') {
    throw new UsageError(
      `--database-url holds a password, which ps shows to every user of this machine: ${passwordElsewhere}`,
    )
  }
  const schemaFlag = flags.schema?.trim()
  const schemaEnv = fromEnv(env, 'OUTBOX_SCHEMA')
  const user = decodeURIComponent(parsed.username) || fromEnv(env, 'PGUSER') || fromEnv(env, 'USER') || ''
  const host = parsed.hostname || parsed.searchParams.get('host') || fromEnv(env, 'PGHOST') || 'localhost'
  const port = parsed.port || parsed.searchParams.get('port') || fromEnv(env, 'PGPORT') || '5432'
  return {
    url,
    where: host.startsWith('/') ? `${host} (port ${port})` : `${host}:${port}`,
    user,
    database: decodeURIComponent(parsed.pathname.slice(1)) || user,
    schema: schemaFlag || schemaEnv || 'public',
    schemaSource: schemaFlag ? '--schema' : schemaEnv ? 'OUTBOX_SCHEMA' : 'default',
    deadlines: {
      relay: resolvePoolDeadlines('relay', env),
      command: resolvePoolDeadlines('command', env),
      migrate: resolvePoolDeadlines('migrate', env),
    },
  }
}

/** How the CLI's pool is set up. */
export interface OpenDatabaseOptions {
  /** Shown in `pg_stat_activity`, so a DBA can tell the relay from an ad-hoc command. */
  readonly applicationName: string
  /** Most connections. @defaultValue 10 (pg's default) */
  readonly max?: number
  /** Called when an idle pooled connection dies (server restart, network cut); the pool replaces it. */
  readonly onIdleError?: (error: Error) => void
}

/**
 * The pg settings of a connection the CLI opens (its pool's, the relay's LISTEN connection, the readiness probe's):
 * the deadlines of `deadlines` (see pool-settings.ts: connect, statement, query, idle-in-transaction, TCP
 * keepalive), so a connection that went silent fails instead of hanging the command.
 */
export function connectionConfig(
  target: DatabaseTarget,
  applicationName: string,
  deadlines: PoolDeadlines = target.deadlines[profileOf(applicationName)],
): ClientConfig {
  return { connectionString: target.url, application_name: applicationName, ...poolSettings(deadlines) }
}

/**
 * Checks the schema name, opens a Kysely instance on its own pg pool, runs `use`, and always destroys the pool —
 * whatever `use` does. Database failures thrown by `use` become one {@link CliError} line naming the server, never
 * a stack trace.
 */
export async function withDatabase<T>(
  target: DatabaseTarget,
  options: OpenDatabaseOptions,
  use: (db: Kysely<any>) => Promise<T>,
): Promise<T> {
  const [{ Kysely, PostgresDialect }, { default: pg }, { notifyChannel, dropTimedOutConnections }] =
    await Promise.all([import('kysely'), import('pg'), loadProducer()])
  try {
    // notifyChannel checks a schema name exactly as every producer function does: a bad name is reported before
    // any connection is made.
    notifyChannel(target.schema)
  } catch (error) {
    // The library's own words, under the name the operator set the schema by.
    const source = target.schemaSource === 'default' ? 'schema' : target.schemaSource
    const message = (error as Partial<OutboxError>).describe?.(() => source, JSON.stringify(target.schema))
    throw new UsageError(message ?? String(error), { cause: error })
  }
  // Deadlines on every connection (see pool-settings.ts): a silent network must not hang a command or the relay.
  const pool = dropTimedOutConnections(
    new pg.Pool({ ...connectionConfig(target, options.applicationName), max: options.max ?? 10 }),
  )
  // Without listeners, a connection dropped by the server is an unhandled 'error' event that kills the process
  // with a stack trace: on the pool for an idle client, on the client itself for one that is checked out (pg-pool
  // removes its own listener while it lends a client, e.g. to a claim's transaction). A checked-out client's query
  // fails as well and its caller reports it, so its listener only has to exist; idle cuts are reported here.
  pool.on('error', (error) => options.onIdleError?.(error))
  pool.on('connect', (client) => client.on('error', () => {}))
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
  try {
    return await use(db)
  } catch (error) {
    const explained = explainDatabaseError(error, target)
    if (explained !== undefined) throw new CliError(explained, 1, { cause: error })
    throw error
  } finally {
    await db.destroy().catch(() => {})
  }
}
