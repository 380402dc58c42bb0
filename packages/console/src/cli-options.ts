import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { parseDuration } from '@outbox/producer'
import type { ConsoleToken } from './options.js'
import { tokenWeakness } from './token-rule.js'

/** What `outbox-console` was asked to do, checked. */
export interface ConsoleCliOptions {
  readonly port: number
  readonly host: string
  /** Every token, each with the actor the audit log records its actions under. */
  readonly tokens: readonly ConsoleToken[]
  readonly databaseUrl: string
  readonly schema: string | undefined
  readonly actions: boolean
  readonly refreshMs: number
  readonly trustProxy: boolean
  /** What the operator should hear before the console starts (a secret on the command line). */
  readonly warnings: readonly string[]
}

/** A usage mistake: printed as one line, exit code 2. */
export class UsageError extends Error {}

/** `outbox-console --help`. */
export const HELP = `outbox-console — the operator's web console of an outbox (@outbox/producer)

Usage: outbox-console --token-file <path> --actor <name> [options]

Options:
  --token-file <path>     the console's token, read from a file (or OUTBOX_CONSOLE_TOKEN_FILE); one token per line,
                          "name:token" to give each person's token its own actor in the audit log
  --token <secret>        the token itself (or OUTBOX_CONSOLE_TOKEN); on the command line ps shows it to every user
                          of the machine, so prefer --token-file or the variable. A token has at least 22
                          characters, 16 of them distinct (openssl rand -base64 32 makes one)
  --actor <name>          who acts with a token the file does not name, in the audit log (or OUTBOX_CONSOLE_ACTOR)
  --database-url <url>    the producer's database (or DATABASE_URL); required. A password belongs in
                          DATABASE_URL or --database-url-file, never on the command line
  --database-url-file <path>  read the database URL from a file (or DATABASE_URL_FILE)
  --schema <name>         schema of the outbox tables (default: public)
  --port <n>              port to listen on (default: 8080)
  --host <address>        address to listen on (default: 127.0.0.1; put a TLS proxy in front for anything else)
  --trust-proxy           the console is behind a proxy that sets X-Forwarded-Proto, -Host and -For: Secure
                          cookies over https, the Origin check against the browser's host, the login throttle per
                          client. Only behind such a proxy: anyone can send these headers
  --actions               show the buttons that act: unblock, skip head, redrive, discard (default: read only)
  --refresh <duration>    how often pages refresh and lag is sampled, e.g. 5s, 1m (default: 5s)
  --help                  show this help

Open http://<host>:<port>/ and sign in with the token, or send "Authorization: Bearer <token>".
`

function fromEnv(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim()
  return value ? value : undefined
}

function readFile(path: string, flag: string): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    // The file's content is never echoed: only its path and what is wrong.
    throw new UsageError(`cannot read ${flag} ${path}: ${code === 'ENOENT' ? 'no such file' : String(code)}`)
  }
  if (text.trim() === '') throw new UsageError(`${flag} ${path} is empty`)
  return text
}

/** The tokens of a token file: one a line, `name:token` naming its actor; blank lines and `#` comments skipped. */
function tokensOfFile(text: string): { actor: string | undefined; token: string }[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const at = line.indexOf(':')
      return at > 0
        ? { actor: line.slice(0, at).trim(), token: line.slice(at + 1).trim() }
        : { actor: undefined, token: line }
    })
}

/** Parses the bin's flags and environment; throws {@link UsageError} naming the flag to fix. */
export function parseConsoleCli(argv: readonly string[], env: NodeJS.ProcessEnv): ConsoleCliOptions | 'help' {
  let values: ReturnType<typeof parse>['values']
  try {
    values = parse(argv).values
  } catch (error) {
    throw new UsageError(`${(error as Error).message}; see outbox-console --help`)
  }
  if (values.help) return 'help'
  const warnings: string[] = []
  const tokens = resolveTokens(values, env, warnings)
  const databaseUrl = resolveDatabaseUrl(values, env)
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
    tokens,
    databaseUrl,
    schema: values.schema,
    actions: values.actions ?? false,
    refreshMs: Math.round(refreshMs),
    trustProxy: values['trust-proxy'] ?? false,
    warnings,
  }
}

type Values = ReturnType<typeof parse>['values']

function resolveTokens(values: Values, env: NodeJS.ProcessEnv, warnings: string[]): ConsoleToken[] {
  const file = values['token-file']?.trim() || fromEnv(env, 'OUTBOX_CONSOLE_TOKEN_FILE')
  const typed = values.token
  const given = typed ?? fromEnv(env, 'OUTBOX_CONSOLE_TOKEN')
  if (file !== undefined && given !== undefined) {
    throw new UsageError(
      'give the token once: --token-file (or OUTBOX_CONSOLE_TOKEN_FILE), or --token / OUTBOX_CONSOLE_TOKEN',
    )
  }
  const source =
    file !== undefined ? '--token-file' : typed !== undefined ? '--token' : 'OUTBOX_CONSOLE_TOKEN'
  const entries =
    file !== undefined
      ? tokensOfFile(readFile(file, '--token-file'))
      : given !== undefined && given !== ''
        ? [{ actor: undefined, token: given }]
        : []
  if (entries.length === 0) {
    throw new UsageError(
      'needs a token: pass --token-file <path> or set OUTBOX_CONSOLE_TOKEN (or --token <secret>, which ps shows); it never serves the outbox without one',
    )
  }
  if (typed !== undefined) {
    warnings.push(
      '--token on the command line is shown by ps to every user of this machine: use --token-file or OUTBOX_CONSOLE_TOKEN',
    )
  }
  const actor = values.actor?.trim() || fromEnv(env, 'OUTBOX_CONSOLE_ACTOR')
  const seen = new Set<string>()
  return entries.map((entry, index) => {
    const where = file !== undefined ? `${source} line ${index + 1}` : source
    const weakness = tokenWeakness(entry.token)
    if (weakness !== undefined) throw new UsageError(`the token of ${where} is too weak: ${weakness}`)
    if (seen.has(entry.token)) throw new UsageError(`${where} repeats a token: give each actor its own`)
    seen.add(entry.token)
    const named = entry.actor || actor
    if (named === undefined) {
      throw new UsageError(
        `who acts with the token of ${where}? The audit log records a name: pass --actor <name> (or OUTBOX_CONSOLE_ACTOR), or write the token as name:token in --token-file`,
      )
    }
    if (named.length > 200) throw new UsageError(`the actor of ${where} is longer than 200 characters`)
    return { actor: named, token: entry.token }
  })
}

function resolveDatabaseUrl(values: Values, env: NodeJS.ProcessEnv): string {
  const typed = values['database-url']?.trim()
  const file = values['database-url-file']?.trim() || fromEnv(env, 'DATABASE_URL_FILE')
  if (typed) {
    let password = ''
    try {
      password = new URL(typed).password
    } catch {
      throw new UsageError(
        '--database-url is not a valid URL; expected postgres://user@host:5432/dbname (percent-encode special characters)',
      )
    }
    // The relay's rule: ps shows every process's arguments to every user, for as long as the console runs.
    if (password !== '') {
      throw new UsageError(
        '--database-url holds a password, which ps shows to every user of this machine: put it in DATABASE_URL or --database-url-file (a file holding the URL)',
      )
    }
  }
  if (file !== undefined && (typed || fromEnv(env, 'DATABASE_URL'))) {
    throw new UsageError(
      'give the database URL once: --database-url-file (or DATABASE_URL_FILE), or DATABASE_URL / --database-url',
    )
  }
  const url =
    typed ||
    (file !== undefined ? readFile(file, '--database-url-file').trim() : fromEnv(env, 'DATABASE_URL'))
  if (url === undefined || url === '') {
    throw new UsageError(
      'outbox-console needs a database: set DATABASE_URL, or pass --database-url-file <path> or --database-url <url>',
    )
  }
  return url
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      token: { type: 'string' },
      'token-file': { type: 'string' },
      actor: { type: 'string' },
      'database-url': { type: 'string' },
      'database-url-file': { type: 'string' },
      schema: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      'trust-proxy': { type: 'boolean' },
      actions: { type: 'boolean' },
      refresh: { type: 'string' },
      help: { type: 'boolean' },
    },
  })
}
