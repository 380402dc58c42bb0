import { createServer, type Socket } from 'node:net'
import { describe, expect, it } from 'vitest'
import { UsageError } from '../src/cli/cli-error.js'
import {
  fitDeadlinesToLease,
  listenSettings,
  poolSettings,
  resolvePoolDeadlines,
} from '../src/cli/pool-settings.js'
import type { OutboxError } from '../src/index.js'
import { resolveRelayOptions } from '../src/options.js'
import { buildCli, cliEnv, expectFailure, runCli } from './cli-process.js'

// A stand-in for Kysely: option checks never reach the database.
const db = { selectFrom: () => {} } as never

describe('the CLI pools’ deadlines', () => {
  it('the relay’s statements are cancelled by the server before its lease runs out, the client waits a margin longer; migrate gets no statement deadline', () => {
    const relay = resolvePoolDeadlines('relay', {})
    expect(relay).toEqual({
      connectTimeoutMs: 10_000,
      statementTimeoutMs: 30_000,
      queryTimeoutMs: 35_000,
      idleInTransactionTimeoutMs: 10_000,
      keepAliveDelayMs: 10_000,
      listenHeartbeatMs: 15_000,
      listenHeartbeatTimeoutMs: 5_000,
    })
    // Below the default lease (60 s): a stuck claim is given up before its lanes could be taken over.
    expect(relay.queryTimeoutMs).toBeLessThan(60_000)
    expect(poolSettings(relay)).toEqual({
      connectionTimeoutMillis: 10_000,
      statement_timeout: 30_000,
      query_timeout: 35_000,
      idle_in_transaction_session_timeout: 10_000,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    })
    expect(resolvePoolDeadlines('command', {}).statementTimeoutMs).toBe(300_000)
    const migrate = poolSettings(resolvePoolDeadlines('migrate', {}))
    expect(migrate).not.toHaveProperty('statement_timeout')
    expect(migrate).not.toHaveProperty('query_timeout')
    expect(migrate).toMatchObject({ connectionTimeoutMillis: 10_000, keepAlive: true })
  })

  it('the environment overrides each deadline; 0 turns one off; the client deadline follows the statement one', () => {
    const deadlines = resolvePoolDeadlines('relay', {
      OUTBOX_DB_STATEMENT_TIMEOUT_MS: '2000',
      OUTBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '0',
      OUTBOX_DB_KEEPALIVE_DELAY_MS: '0',
      OUTBOX_LISTEN_HEARTBEAT_MS: '1000',
    })
    expect(poolSettings(deadlines)).toEqual({
      connectionTimeoutMillis: 10_000,
      statement_timeout: 2000,
      query_timeout: 7000,
      keepAlive: false,
    })
    expect(listenSettings('postgres://x@h/db', deadlines)).toEqual({
      connectionString: 'postgres://x@h/db',
      connectTimeoutMs: 10_000,
      heartbeatIntervalMs: 1000,
      heartbeatTimeoutMs: 5000,
    })
    expect(resolvePoolDeadlines('relay', { OUTBOX_DB_STATEMENT_TIMEOUT_MS: '0' }).queryTimeoutMs).toBe(0)
  })

  it('with a lease shorter than the statement deadline, the relay’s statement and query deadlines follow the lease, unless the environment set them', () => {
    const defaults = resolvePoolDeadlines('relay', {})
    expect(fitDeadlinesToLease(defaults, 2000, {})).toMatchObject({
      statementTimeoutMs: 2000,
      queryTimeoutMs: 7000,
    })
    expect(fitDeadlinesToLease(defaults, 60_000, {})).toEqual(defaults)
    const statement = { OUTBOX_DB_STATEMENT_TIMEOUT_MS: '20000' }
    expect(fitDeadlinesToLease(resolvePoolDeadlines('relay', statement), 2000, statement)).toMatchObject({
      statementTimeoutMs: 20_000,
      queryTimeoutMs: 25_000,
    })
    const query = { OUTBOX_DB_QUERY_TIMEOUT_MS: '9000' }
    expect(fitDeadlinesToLease(resolvePoolDeadlines('relay', query), 2000, query)).toMatchObject({
      statementTimeoutMs: 2000,
      queryTimeoutMs: 9000,
    })
  })

  it('a bad value is a usage error naming the variable', () => {
    for (const [name, value] of [
      ['OUTBOX_DB_QUERY_TIMEOUT_MS', '5s'],
      ['OUTBOX_DB_CONNECT_TIMEOUT_MS', '0'],
      ['OUTBOX_LISTEN_HEARTBEAT_MS', '-1'],
      ['OUTBOX_DB_STATEMENT_TIMEOUT_MS', '1.5'],
    ] as const) {
      const attempt = () => resolvePoolDeadlines('relay', { [name]: value })
      expect(attempt).toThrow(UsageError)
      expect(attempt).toThrow(new RegExp(`^${name} must be a whole number of milliseconds.*got "${value}"`))
    }
  })
})

describe('the LISTEN heartbeat options', () => {
  it('are checked when the relay is created, naming the option', () => {
    const refusal = (listen: object) => {
      try {
        resolveRelayOptions({ db, endpoint: 'http://127.0.0.1/hooks', listen: listen as never })
      } catch (error) {
        return error as OutboxError
      }
      throw new Error('expected the options to be refused')
    }
    const connectionString = 'postgres://x@127.0.0.1/db'
    expect(refusal({ connectionString, heartbeatIntervalMs: -1 })).toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'listen.heartbeatIntervalMs',
    })
    expect(refusal({ connectionString, heartbeatTimeoutMs: 0 })).toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'listen.heartbeatTimeoutMs',
    })
    // 0 turns the heartbeat off.
    expect(
      resolveRelayOptions({
        db,
        endpoint: 'http://127.0.0.1/hooks',
        listen: { connectionString, heartbeatIntervalMs: 0 },
      }).listen,
    ).toEqual({ connectionString, heartbeatIntervalMs: 0 })
  })
})

describe('outbox against a silent database', () => {
  it('a server that accepts TCP and never answers fails the command after the connect deadline, in one line', async () => {
    buildCli()
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const { port } = silent.address() as { port: number }
    try {
      const started = performance.now()
      const result = await runCli(
        ['stats'],
        cliEnv({
          DATABASE_URL: `postgres://postgres:s3cret-password@127.0.0.1:${port}/outbox`,
          OUTBOX_DB_CONNECT_TIMEOUT_MS: '500',
        }),
      )
      const line = expectFailure(result, 1, new RegExp(`127\\.0\\.0\\.1:${port}`))
      expect(line).not.toContain('s3cret-password')
      expect(performance.now() - started).toBeLessThan(10_000)
      expect(
        await runCli(
          ['stats'],
          cliEnv({ DATABASE_URL: 'postgres://x@127.0.0.1/db', OUTBOX_DB_QUERY_TIMEOUT_MS: 'soon' }),
        ),
      ).toMatchObject({ code: 2 })
    } finally {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => silent.close(resolve))
    }
  })
})
