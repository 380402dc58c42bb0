import { UsageError } from './cli-error.js'

/**
 * The deadlines of the CLI's own database connections. A connection that goes silent (a network partition, a
 * failover that moved the address, a firewall that dropped the flow) raises no error: only a deadline notices it.
 *
 * The relay's values are set against its defaults — a 60 s lease and a 10 s request timeout:
 * - `statementTimeoutMs` (server side) 30 s: a claim or mark is a bounded statement that takes milliseconds; one
 *   stuck on a lock or a crawling server is cancelled and reported well before the lease of the lanes it holds runs
 *   out. With a lease shorter than a deadline (`--lease`), lanes may expire under a hung statement and be taken
 *   over; that is safe — every write is fenced by its claim token — only slower.
 * - `queryTimeoutMs` (client side) 35 s, the statement timeout plus a margin: a server that is alive cancels first
 *   and says why (57014); the client's deadline only fires when nothing comes back at all, and then the connection
 *   is thrown away ({@link dropTimedOutConnections}).
 * - `idleInTransactionTimeoutMs` 10 s: the relay never waits between the statements of a transaction, so a session
 *   idle in one is a relay that was cut off mid-claim; the server ends it and frees the lane rows it locked (which
 *   other relays would otherwise skip with SKIP LOCKED), well before their leases end.
 * - `connectTimeoutMs` 10 s: a host that accepts TCP and never answers fails the connect instead of hanging it.
 * - TCP keepalive after `keepAliveDelayMs` 10 s idle: the backstop for a connection idle in the pool, where no
 *   query runs for a deadline to notice. Node sets only the first probe's delay; the interval and count are the
 *   kernel's (Linux: 75 s × 9), so a dead idle connection is found after about 11.5 minutes — unless a query finds
 *   it first.
 *
 * One-shot commands (`stats`, `prune`, `doctor`, …) may scan a large outbox, so their statements get 5 minutes;
 * `migrate` gets no statement deadline at all (a migration may rewrite a large table) but keeps the others.
 */
export interface PoolDeadlines {
  readonly connectTimeoutMs: number
  /** 0: none. */
  readonly statementTimeoutMs: number
  /** 0: none. */
  readonly queryTimeoutMs: number
  /** 0: none. */
  readonly idleInTransactionTimeoutMs: number
  /** 0: keepalive off. */
  readonly keepAliveDelayMs: number
  /** The LISTEN connection's heartbeat (`outbox relay --listen`); 0: off. */
  readonly listenHeartbeatMs: number
  readonly listenHeartbeatTimeoutMs: number
}

/** Which deadlines a command gets by default. */
export type PoolProfile = 'relay' | 'command' | 'migrate'

/** The profile of a command, by the application name its pool reports (`outbox relay`, `outbox migrate`, …). */
export function profileOf(applicationName: string): PoolProfile {
  if (applicationName === 'outbox relay') return 'relay'
  return applicationName === 'outbox migrate' ? 'migrate' : 'command'
}

/** How much later the client gives up than the server: time for the server's own cancel to arrive. */
const QUERY_TIMEOUT_MARGIN_MS = 5_000

const STATEMENT_TIMEOUT_MS: Record<PoolProfile, number> = {
  relay: 30_000,
  command: 300_000,
  migrate: 0,
}

const ENV = {
  connectTimeoutMs: 'OUTBOX_DB_CONNECT_TIMEOUT_MS',
  statementTimeoutMs: 'OUTBOX_DB_STATEMENT_TIMEOUT_MS',
  queryTimeoutMs: 'OUTBOX_DB_QUERY_TIMEOUT_MS',
  idleInTransactionTimeoutMs: 'OUTBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS',
  keepAliveDelayMs: 'OUTBOX_DB_KEEPALIVE_DELAY_MS',
  listenHeartbeatMs: 'OUTBOX_LISTEN_HEARTBEAT_MS',
  listenHeartbeatTimeoutMs: 'OUTBOX_LISTEN_HEARTBEAT_TIMEOUT_MS',
} as const satisfies Record<keyof PoolDeadlines, string>

/** The environment variables that override the deadlines, for help text and docs. */
export const POOL_DEADLINE_ENV: readonly string[] = Object.values(ENV)

function milliseconds(env: NodeJS.ProcessEnv, name: string, min: number): number | undefined {
  const raw = env[name]?.trim()
  if (!raw) return undefined
  const value = Number(raw)
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < min) {
    throw new UsageError(
      `${name} must be a whole number of milliseconds${min > 0 ? ` of at least ${min}` : ' (0 turns it off)'}, got ${JSON.stringify(raw)}`,
    )
  }
  return value
}

/**
 * The deadlines for a command, from its profile and the `OUTBOX_DB_*` / `OUTBOX_LISTEN_*` environment variables
 * (whole milliseconds; 0 turns a deadline off). A bad value is a usage error naming the variable. Parameters in the
 * database URL (`?statement_timeout=…`) still win: pg reads them after the pool's settings.
 */
export function resolvePoolDeadlines(profile: PoolProfile, env: NodeJS.ProcessEnv): PoolDeadlines {
  const statementTimeoutMs = milliseconds(env, ENV.statementTimeoutMs, 0) ?? STATEMENT_TIMEOUT_MS[profile]
  // Without a statement deadline there is no server-side cancel to wait for: the client's deadline follows it.
  const queryTimeoutMs =
    milliseconds(env, ENV.queryTimeoutMs, 0) ??
    (statementTimeoutMs === 0 ? 0 : statementTimeoutMs + QUERY_TIMEOUT_MARGIN_MS)
  return {
    connectTimeoutMs: milliseconds(env, ENV.connectTimeoutMs, 1) ?? 10_000,
    statementTimeoutMs,
    queryTimeoutMs,
    idleInTransactionTimeoutMs: milliseconds(env, ENV.idleInTransactionTimeoutMs, 0) ?? 10_000,
    keepAliveDelayMs: milliseconds(env, ENV.keepAliveDelayMs, 0) ?? 10_000,
    listenHeartbeatMs: milliseconds(env, ENV.listenHeartbeatMs, 0) ?? 15_000,
    listenHeartbeatTimeoutMs: milliseconds(env, ENV.listenHeartbeatTimeoutMs, 1) ?? 5_000,
  }
}

/**
 * The relay's deadlines against its lease (`--lease`): a statement that outlives the lease is useless, as the
 * claim it serves has expired meanwhile, and a stalled claim should fail and be reported within one lease. So with a
 * lease shorter than the default statement deadline, the statement and query deadlines follow the lease — unless
 * `OUTBOX_DB_STATEMENT_TIMEOUT_MS` or `OUTBOX_DB_QUERY_TIMEOUT_MS` set them, which wins.
 */
export function fitDeadlinesToLease(
  deadlines: PoolDeadlines,
  leaseMs: number,
  env: NodeJS.ProcessEnv,
): PoolDeadlines {
  if (env[ENV.statementTimeoutMs] !== undefined || deadlines.statementTimeoutMs <= leaseMs) return deadlines
  return {
    ...deadlines,
    statementTimeoutMs: leaseMs,
    queryTimeoutMs:
      env[ENV.queryTimeoutMs] !== undefined ? deadlines.queryTimeoutMs : leaseMs + QUERY_TIMEOUT_MARGIN_MS,
  }
}

/** The pg pool settings for these deadlines (0 leaves a setting out: pg's default, none). */
export function poolSettings(deadlines: PoolDeadlines): {
  connectionTimeoutMillis: number
  statement_timeout?: number
  query_timeout?: number
  idle_in_transaction_session_timeout?: number
  keepAlive: boolean
  keepAliveInitialDelayMillis?: number
} {
  return {
    connectionTimeoutMillis: deadlines.connectTimeoutMs,
    ...(deadlines.statementTimeoutMs > 0 && { statement_timeout: deadlines.statementTimeoutMs }),
    ...(deadlines.queryTimeoutMs > 0 && { query_timeout: deadlines.queryTimeoutMs }),
    ...(deadlines.idleInTransactionTimeoutMs > 0 && {
      idle_in_transaction_session_timeout: deadlines.idleInTransactionTimeoutMs,
    }),
    keepAlive: deadlines.keepAliveDelayMs > 0,
    ...(deadlines.keepAliveDelayMs > 0 && { keepAliveInitialDelayMillis: deadlines.keepAliveDelayMs }),
  }
}

/** The relay's `listen` option for `--listen`: its own connection, with the same connect deadline and a heartbeat. */
export function listenSettings(
  url: string,
  deadlines: PoolDeadlines,
): {
  connectionString: string
  connectTimeoutMs: number
  heartbeatIntervalMs: number
  heartbeatTimeoutMs: number
} {
  return {
    connectionString: url,
    connectTimeoutMs: deadlines.connectTimeoutMs,
    heartbeatIntervalMs: deadlines.listenHeartbeatMs,
    heartbeatTimeoutMs: deadlines.listenHeartbeatTimeoutMs,
  }
}
