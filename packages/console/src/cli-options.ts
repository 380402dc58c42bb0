import { parseArgs } from 'node:util'
import { parseDuration } from '@outbox/producer'

/** What `outbox-console` was asked to do, checked. */
export interface ConsoleCliOptions {
  readonly port: number
  readonly host: string
  readonly token: string
  readonly databaseUrl: string
  readonly schema: string | undefined
  readonly actions: boolean
  readonly refreshMs: number
}

/** A usage mistake: printed as one line, exit code 2. */
export class UsageError extends Error {}

/** `outbox-console --help`. */
export const HELP = `outbox-console — the operator's web console of an outbox (@outbox/producer)

Usage: outbox-console --token <secret> [options]

Options:
  --token <secret>        the console's token (or OUTBOX_CONSOLE_TOKEN); required, at least 16 characters
  --database-url <url>    the producer's database (or DATABASE_URL); required
  --schema <name>         schema of the outbox tables (default: public)
  --port <n>              port to listen on (default: 8080)
  --host <address>        address to listen on (default: 127.0.0.1; put a TLS proxy in front for anything else)
  --actions               show the buttons that act: unblock, skip head, redrive, discard (default: read only)
  --refresh <duration>    how often pages refresh and lag is sampled, e.g. 5s, 1m (default: 5s)
  --help                  show this help

Open http://<host>:<port>/ and sign in with the token, or send "Authorization: Bearer <token>".
`

/** Parses the bin's flags and environment; throws {@link UsageError} naming the flag to fix. */
export function parseConsoleCli(argv: readonly string[], env: NodeJS.ProcessEnv): ConsoleCliOptions | 'help' {
  let values: ReturnType<typeof parse>['values']
  try {
    values = parse(argv).values
  } catch (error) {
    throw new UsageError(`${(error as Error).message}; see outbox-console --help`)
  }
  if (values.help) return 'help'
  const token = values.token ?? env.OUTBOX_CONSOLE_TOKEN
  if (token === undefined || token === '') {
    throw new UsageError(
      'outbox-console needs a token: pass --token <secret> or set OUTBOX_CONSOLE_TOKEN (it never serves the outbox without one)',
    )
  }
  if (token.length < 16)
    throw new UsageError('--token / OUTBOX_CONSOLE_TOKEN must be at least 16 characters long')
  const databaseUrl = values['database-url'] ?? env.DATABASE_URL
  if (databaseUrl === undefined || databaseUrl === '') {
    throw new UsageError('outbox-console needs a database: pass --database-url <url> or set DATABASE_URL')
  }
  const port = Number(values.port ?? '8080')
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new UsageError(`--port must be a port number (0–65535), got ${JSON.stringify(values.port)}`)
  }
  let refreshMs: number
  try {
    refreshMs = parseDuration(values.refresh ?? '5s', '--refresh')
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
  if (refreshMs < 1000)
    throw new UsageError(`--refresh must be at least 1s, got ${JSON.stringify(values.refresh)}`)
  return {
    port,
    host: values.host ?? '127.0.0.1',
    token,
    databaseUrl,
    schema: values.schema,
    actions: values.actions ?? false,
    refreshMs: Math.round(refreshMs),
  }
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      token: { type: 'string' },
      'database-url': { type: 'string' },
      schema: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      actions: { type: 'boolean' },
      refresh: { type: 'string' },
      help: { type: 'boolean' },
    },
  })
}
