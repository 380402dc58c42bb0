import { readFileSync } from 'node:fs'
import { useTestDatabase, withDatabase } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { HELP } from '../src/cli/help-text.js'
import {
  DEFAULT_BATCH_SIZE,
  DEFAULT_CONCURRENCY,
  DEFAULT_LEASE_MS,
  DEFAULT_OUTBOX_PRUNE_BATCH_SIZE,
  DEFAULT_OUTBOX_PRUNE_MAX_BATCHES,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_RETRY_SCHEDULE,
  STRUGGLING_ATTEMPTS,
} from '../src/index.js'
import { buildCli, cliEnv, expectFailure, REFUSED_URL, runCli, withoutPassword } from './cli-process.js'

const t = useTestDatabase()

/** Encryption keys for `secrets reencrypt`, which wants them before it looks at the database. */
const KEYS = `k1:${Buffer.alloc(32, 1).toString('base64')}`

beforeAll(() => buildCli(), 120_000)

const COMMANDS = [
  ['migrate'],
  ['relay', '--endpoint', 'http://127.0.0.1:9/hooks'],
  ['stats'],
  ['stats', '--watch'],
  ['prune', '--retention', '30d'],
  ['dead-letters', 'list'],
  ['dead-letters', 'redrive', '--all'],
  ['deliveries', 'list'],
] as const

describe.concurrent('outbox (top level)', () => {
  it('prints help for the program and for every command, and its version', async () => {
    const [top, version, ...commands] = await Promise.all([
      runCli(['--help'], cliEnv()),
      runCli(['--version'], cliEnv()),
      ...['migrate', 'relay', 'stats', 'prune', 'dead-letters'].map((name) =>
        runCli([name, '--help'], cliEnv()),
      ),
      runCli(['dead-letters', 'list', '--help'], cliEnv()),
      runCli(['dead-letters', 'redrive', '-h'], cliEnv()),
      // Help wins over other mistakes on the line: an operator asking for help gets it.
      runCli(['prune', '--bogus', '--help'], cliEnv()),
    ])
    expect(top!.code).toBe(0)
    for (const name of ['migrate', 'relay', 'stats', 'prune', 'dead-letters'])
      expect(top!.stdout).toContain(name)
    expect(top!.stdout).toMatch(/Exit codes: 0 .* 2 usage error .* 3 prune did not catch up/)
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
    expect(version).toMatchObject({ code: 0, stdout: `${manifest.version}\n`, stderr: '' })
    const usage = [
      'migrate',
      'relay',
      'stats',
      'prune',
      'dead-letters <list|show|redrive|discard>',
      'dead-letters list',
      'dead-letters redrive',
      'prune',
    ]
    commands.forEach((result, index) => {
      expect(result.code).toBe(0)
      expect(result.stderr).toBe('')
      expect(result.stdout.startsWith(`Usage: outbox ${usage[index]}`), result.stdout).toBe(true)
    })
  })

  it("quotes the library's defaults in its help (the help is kept apart so it loads fast)", () => {
    const relay = HELP.relay
    expect(relay).toContain(`lanes delivered in parallel (default ${DEFAULT_CONCURRENCY})`)
    expect(relay).toContain(`per claim (default ${DEFAULT_BATCH_SIZE})`)
    expect(relay).toContain(`owns its lane (default ${DEFAULT_LEASE_MS / 1000}s)`)
    expect(relay).toContain(`inside the lease (default ${DEFAULT_REQUEST_TIMEOUT_MS / 1000}s)`)
    expect(relay).toContain(`looks for work (default ${DEFAULT_POLL_INTERVAL_MS}ms)`)
    const units: [number, string][] = [
      [3_600_000, 'h'],
      [60_000, 'm'],
      [1000, 's'],
    ]
    const schedule = DEFAULT_RETRY_SCHEDULE.map((ms) => {
      const [size, unit] = units.find(([size]) => ms % size === 0)!
      return `${ms / size}${unit}`
    }).join(',')
    expect(relay).toContain(`(default ${schedule};`)
    expect(HELP.prune).toContain(`rows per delete statement (default ${DEFAULT_OUTBOX_PRUNE_BATCH_SIZE})`)
    expect(HELP.prune).toContain(`for this run (default ${DEFAULT_OUTBOX_PRUNE_MAX_BATCHES})`)
    expect(HELP.stats).toContain(`failed ${STRUGGLING_ATTEMPTS} or more times`)
  })

  it('answers usage mistakes with one line and exit code 2', async () => {
    const [bare, unknown, early, flag, positional, value, missing] = await Promise.all(
      [
        [],
        ['frobnicate'],
        ['--json'],
        ['stats', '--jsno'],
        ['stats', 'extra'],
        ['stats', '--json=yes'],
        ['stats', '--schema'],
      ].map((args) => runCli(args, cliEnv())),
    )
    expect(bare!.code).toBe(2)
    expect(bare!.stderr).toContain('Usage: outbox <command>')
    expectFailure(unknown!, 2, /unknown command "frobnicate".*migrate, relay/)
    expectFailure(early!, 2, /options go after the command/)
    expectFailure(flag!, 2, /unknown option --jsno \(see outbox stats --help\)/)
    expectFailure(positional!, 2, /unexpected argument "extra"/)
    expectFailure(value!, 2, /--json takes no value/)
    expectFailure(missing!, 2, /--schema needs a value/)
  })

  it('needs a database URL, and rejects a malformed one without echoing it', async () => {
    const results = await Promise.all([
      runCli(['stats'], cliEnv()),
      runCli(['stats'], cliEnv({ DATABASE_URL: '   ' })),
      runCli(['stats', '--database-url', 'not a url :s3cret'], cliEnv()),
      runCli(['stats'], cliEnv({ DATABASE_URL: 'postgres://app:s3cr%t@db/app' })),
      runCli(['stats', '--database-url', 'mysql://app:s3cret@db/app'], cliEnv()),
    ])
    expectFailure(results[0]!, 2, /no database: set DATABASE_URL or pass --database-url/)
    expectFailure(results[1]!, 2, /no database/)
    expectFailure(results[2]!, 2, /--database-url is not a valid URL; expected postgres:\/\//)
    expectFailure(results[3]!, 2, /DATABASE_URL is not a valid URL/)
    expectFailure(results[4]!, 2, /--database-url must start with postgres:\/\/ or postgresql:\/\//)
    for (const result of results) expect(result.stderr).not.toContain('s3cr')
  })

  it('refuses a password in --database-url in every command, naming DATABASE_URL, without echoing it', async () => {
    // A port nothing listens on: without the refusal each command would try to connect and fail otherwise.
    const typed = 'postgres://app:pa55-typed@127.0.0.1:1/outbox'
    const commands = [
      ...COMMANDS.filter(([name]) => name !== 'relay'),
      ['doctor'],
      ['subscriptions', 'list'],
      ['subscriptions', 'rotate-secret', 'acme'],
      ['lanes', 'list', '--state', 'blocked'],
      ['audit'],
      ['secrets', 'reencrypt'],
    ]
    const results = await Promise.all(
      commands.map((args) =>
        runCli([...args, '--database-url', typed], cliEnv({ OUTBOX_SECRET_KEYS: KEYS })),
      ),
    )
    results.forEach((result, index) => {
      const line = expectFailure(
        result,
        2,
        /--database-url holds a password, which ps shows to every user of this machine: put the URL in DATABASE_URL instead, or leave the password out of it and set PGPASSWORD$/,
      )
      expect(line, commands[index]!.join(' ')).not.toContain('pa55-typed')
    })
    // The relay says so too, and names the file it can also read the URL from (cli.relay-settings.test.ts).
    expectFailure(
      await runCli(['relay', '--endpoint', 'http://127.0.0.1:9/hooks', '--database-url', typed], cliEnv()),
      2,
      /--database-url holds a password.*DATABASE_URL or --database-url-file/,
    )
  })

  it('reports an unreachable database in every command but the relay: host and port, check DATABASE_URL, exit 1', async () => {
    // The relay waits for its database instead (cli.relay-database-wait.test.ts): it may be started beside it.
    const results = await Promise.all(
      COMMANDS.filter(([name]) => name !== 'relay').map((args) =>
        runCli(args, cliEnv({ DATABASE_URL: REFUSED_URL })),
      ),
    )
    results.forEach((result) => {
      const line = expectFailure(
        result,
        1,
        /^outbox: cannot connect to PostgreSQL at 127\.0\.0\.1:1: connection refused; check DATABASE_URL/,
      )
      expect(line).not.toContain('s3cret-password')
    })
  })

  it('explains an unknown host, a missing database and missing tables', async () => {
    const [host, database, tables, schema] = await Promise.all([
      runCli(['stats', '--database-url', 'postgres://postgres@no-such-host.invalid:5432/x'], cliEnv()),
      runCli(
        ['dead-letters', 'list'],
        cliEnv({ DATABASE_URL: withDatabase(t.url, 'no_such_database_here') }),
      ),
      runCli(['prune', '--retention', '1d', '--schema', 'not_migrated'], cliEnv({ DATABASE_URL: t.url })),
      runCli(['stats'], cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: 'also_not_migrated' })),
    ])
    expectFailure(host, 1, /cannot resolve the database host no-such-host\.invalid; check DATABASE_URL/)
    expectFailure(
      database,
      1,
      /database "no_such_database_here" does not exist on PostgreSQL at .*; check DATABASE_URL/,
    )
    expectFailure(
      tables,
      1,
      /outbox tables are missing in schema "not_migrated".*run: outbox migrate --schema not_migrated$/,
    )
    expectFailure(schema, 1, /schema "also_not_migrated"/)
  })

  it('checks the schema name before connecting, from --schema or OUTBOX_SCHEMA', async () => {
    const [flag, env] = await Promise.all([
      runCli(['stats', '--schema', 'Bad-Name'], cliEnv({ DATABASE_URL: REFUSED_URL })),
      runCli(['stats'], cliEnv({ DATABASE_URL: REFUSED_URL, OUTBOX_SCHEMA: 'x;drop' })),
    ])
    expectFailure(flag, 2, /--schema must be a lower-case SQL identifier.*"Bad-Name"/)
    expectFailure(env, 2, /OUTBOX_SCHEMA must be a lower-case SQL identifier/)
  })

  it('lets flags win over the environment, with the password in PGPASSWORD as the refusal advises', async () => {
    const { url, password } = withoutPassword(t.url)
    const result = await runCli(
      ['stats', '--json', '--database-url', url],
      cliEnv({ DATABASE_URL: REFUSED_URL, PGPASSWORD: password }),
    )
    expect(result.code, result.stderr).toBe(0)
    expect(JSON.parse(result.stdout)).toMatchObject({ pending: 0 })
  })
})
