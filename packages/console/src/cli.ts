#!/usr/bin/env node
import type { AddressInfo } from 'node:net'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import { HELP, parseConsoleCli, UsageError } from './cli-options.js'
import { createConsole } from './create-console.js'

/** The pool's own `statement_timeout`: the actions run on it (the pages' reads set a shorter one of their own). */
const STATEMENT_TIMEOUT_MS = 30_000
/** How long to wait for a connection before a page fails, rather than hang. */
const CONNECT_TIMEOUT_MS = 10_000

let options: ReturnType<typeof parseConsoleCli>
try {
  options = parseConsoleCli(process.argv.slice(2), process.env)
} catch (error) {
  if (!(error instanceof UsageError)) throw error
  process.stderr.write(`outbox-console: ${error.message}\n`)
  process.exit(2)
}
if (options === 'help') {
  process.stdout.write(HELP)
  process.exit(0)
}
for (const warning of options.warnings) process.stderr.write(`outbox-console: warning: ${warning}\n`)

const pool = new pg.Pool({
  connectionString: options.databaseUrl,
  application_name: 'outbox-console',
  connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
  statement_timeout: STATEMENT_TIMEOUT_MS,
  max: 5,
})
// A connection the server drops must not kill the console with an unhandled 'error' event (see open-database.ts
// in @outbox/producer: pg-pool removes its listener from a client while it is lent out).
pool.on('error', (error) =>
  process.stderr.write(`outbox-console: database connection lost: ${error.message}\n`),
)
pool.on('connect', (client) => client.on('error', () => {}))
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
const outboxConsole = createConsole({
  db,
  tokens: options.tokens,
  actions: options.actions,
  trustProxy: options.trustProxy,
  logger: {
    debug: () => {},
    info: () => {},
    warn: (_fields, message) => process.stderr.write(`outbox-console: ${message}\n`),
    error: (_fields, message) => process.stderr.write(`outbox-console: ${message}\n`),
  },
  schema: options.schema,
  refreshMs: options.refreshMs,
})
const app = express()
app.disable('x-powered-by')
app.use('/', outboxConsole)
app.use(
  (error: unknown, _request: express.Request, response: express.Response, _next: express.NextFunction) => {
    // One line on stderr, a plain 500 to the browser: no stack trace, no connection string, on either side.
    process.stderr.write(`outbox-console: ${error instanceof Error ? error.message : String(error)}\n`)
    response.status(500).type('text').send('The console failed to read the outbox; see its log.')
  },
)

const server = app.listen(options.port, options.host, () => {
  const { address, port } = server.address() as AddressInfo
  const host = address.includes(':') ? `[${address}]` : address
  process.stdout.write(`outbox-console listening on http://${host}:${port}/\n`)
})
server.on('error', (error) => {
  process.stderr.write(`outbox-console: cannot listen on ${options.host}:${options.port}: ${error.message}\n`)
  process.exit(1)
})

let stopping = false
async function stop(signal: string): Promise<void> {
  if (stopping) return
  stopping = true
  process.stdout.write(`outbox-console: ${signal}, closing\n`)
  server.close()
  server.closeIdleConnections()
  await outboxConsole.close()
  await db.destroy()
  process.exit(0)
}
process.on('SIGTERM', () => void stop('SIGTERM'))
process.on('SIGINT', () => void stop('SIGINT'))
