import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { Webhook } from 'standardwebhooks'
import { beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { maskCredentials } from '../src/cli/mask-credentials.js'
import { migrate, Relay, silentLogger } from '../src/index.js'
import { buildCli, type CliProcess, cliEnv, expectFailure, runCli, startCli } from './cli-process.js'
import { seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

const dir = mkdtempSync(join(tmpdir(), 'outbox-relay-settings-'))

function file(name: string, text: string): string {
  const path = join(dir, name)
  writeFileSync(path, text)
  return path
}

function secret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}

async function sink(onTestFinished: TestContext['onTestFinished']): Promise<Sink> {
  const started = await startSink()
  onTestFinished(() => started.close())
  return started
}

/** The JSON lines the relay wrote (stdout is a pipe here, so JSON is the default). */
function jsonLines(relay: CliProcess): Record<string, unknown>[] {
  return relay.lines().map((line) => JSON.parse(line) as Record<string, unknown>)
}

async function startedLine(relay: CliProcess): Promise<Record<string, unknown>> {
  await relay.waitFor(() => /"msg":"relay started"/.test(relay.stdout()), 'relay started')
  return jsonLines(relay).find((line) => line.msg === 'relay started')!
}

/** The password of the test database's URL, with one put in when the harness's URL has none. */
function urlWithPassword(url: string, password: string): string {
  const parsed = new URL(url)
  parsed.password = password
  return parsed.toString()
}

describe.concurrent('outbox relay settings: environment, config file, secrets', () => {
  it('reads every flag from OUTBOX_<FLAG> and a --config file: flags win over the environment, which wins over the file; JSON logs off a terminal', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = 'relay_settings_precedence'
    await migrate(t.db, { schema })
    const config = file(
      'precedence.json',
      JSON.stringify({
        concurrency: 5,
        batchSize: 7,
        lease: '20s',
        endpoint: hooks.url,
        schema,
        listen: true,
        pollInterval: 75,
      }),
    )
    const relay = startCli(
      ['relay', '--config', config, '--lease', '30s'],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_CONCURRENCY: '4', OUTBOX_ON_EXHAUSTED: 'block' }),
      { onTestFinished },
    )
    expect(await startedLine(relay)).toMatchObject({
      level: 'info',
      schema,
      concurrency: 4, // environment over file
      batchSize: 7, // file
      leaseMs: 30_000, // flag over file
      onExhausted: 'block', // environment
      wakeUps: `LISTEN outbox_${schema} + polling every 75ms`, // booleans and numbers from the file
    })
    expect((await relay.stop('SIGTERM')).code).toBe(0)
  })

  it('refuses a config key it does not know by name, a file that is not JSON, and a boolean variable that is not one', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    expectFailure(
      await runCli(['relay', '--config', file('typo.json', '{"concurency": 3}')], env),
      2,
      /unknown key "concurency" in .*typo\.json; the keys are the flags in camel case: databaseUrl, .*concurrency/,
    )
    expectFailure(
      await runCli(['relay', '--config', file('broken.json', '{"concurrency": ')], env),
      2,
      /--config .*broken\.json is not valid JSON/,
    )
    expectFailure(
      await runCli(['relay'], cliEnv({ DATABASE_URL: t.url, OUTBOX_CONFIG: join(dir, 'missing.json') })),
      2,
      /cannot read OUTBOX_CONFIG .*missing\.json: no such file/,
    )
    expectFailure(
      await runCli(['relay'], cliEnv({ DATABASE_URL: t.url, OUTBOX_LISTEN: 'maybe' })),
      2,
      /OUTBOX_LISTEN must be true or false, got "maybe"/,
    )
    expectFailure(
      await runCli(['relay'], cliEnv({ DATABASE_URL: t.url, OUTBOX_CONCURRENCY: 'lots' })),
      2,
      /--concurrency must be .*got "lots"/,
    )
  })

  it('refuses a database password on the command line, naming where to put it, without echoing it', async () => {
    const url = urlWithPassword(t.url, 'pa55-on-the-command-line')
    const line = expectFailure(
      await runCli(['relay', '--database-url', url, '--endpoint', 'http://127.0.0.1:9/h'], cliEnv()),
      2,
      /--database-url holds a password, which ps shows to every user of this machine: put it in DATABASE_URL or --database-url-file/,
    )
    expect(line).not.toContain('pa55-on-the-command-line')
    expectFailure(
      await runCli(
        ['relay', '--database-url-file', file('url-twice', t.url)],
        cliEnv({ DATABASE_URL: t.url }),
      ),
      2,
      /give the database URL once/,
    )
    expectFailure(
      await runCli(['relay', '--secret-file', join(dir, 'no-secrets')], cliEnv({ DATABASE_URL: t.url })),
      2,
      /cannot read --secret-file .*no-secrets: no such file/,
    )
  })

  it('takes the database URL and the signing secrets from files: it signs with each, and prints neither, nor shows them in ps', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = 'relay_settings_files'
    await migrate(t.db, { schema })
    await seedEvents(t.db, ['f1'], 1, { schema })
    const [a, b] = [secret(), secret()]
    const urlFile = file('database-url', `${t.url}\n`)
    const secretFile = file('secrets', `${a}\n${b}\n`)
    const relay = startCli(
      ['relay', '--endpoint', hooks.url, '--poll-interval', '50ms'],
      cliEnv({ DATABASE_URL_FILE: urlFile, OUTBOX_SECRET_FILE: secretFile, OUTBOX_SCHEMA: schema }),
      { onTestFinished },
    )
    expect(await startedLine(relay)).toMatchObject({ signingSecrets: 2 })
    await waitFor(() => hooks.requests.length === 1, 'the delivery')
    for (const key of [a, b]) {
      const request = hooks.requests[0]!
      expect(() =>
        new Webhook(key).verify(request.body, request.headers as Record<string, string>),
      ).not.toThrow()
    }
    const cmdline = readFileSync(`/proc/${relay.child.pid}/cmdline`, 'utf8')
    const result = await relay.stop('SIGTERM')
    expect(result.code, result.stderr).toBe(0)
    for (const text of [a, b, a.slice(6), b.slice(6)]) {
      expect(cmdline).not.toContain(text)
      expect(result.stdout).not.toContain(text)
      expect(result.stderr).not.toContain(text)
    }
  })

  it('masks the credentials of an endpoint URL it echoes in an error', async () => {
    const line = expectFailure(
      await runCli(
        ['relay', '--endpoint', 'https://hooks:pa55word@billing internal/in'],
        cliEnv({ DATABASE_URL: t.url }),
      ),
      2,
      /--endpoint is not a valid URL/,
    )
    expect(line).toContain('https://hooks:***@billing internal/in')
    expect(line).not.toContain('pa55word')
  })

  it('keeps secrets and connection strings out of relay.options', () => {
    const key = secret()
    const relay = new Relay({
      db: t.db,
      endpoint: 'http://127.0.0.1:9/hooks',
      secret: key,
      listen: async () => {
        throw new Error('not connected in this test')
      },
      logger: silentLogger,
    })
    const { db: _db, logger: _logger, ...rest } = relay.options
    const shown = JSON.stringify(rest, (_key, value) => (typeof value === 'function' ? String(value) : value))
    expect(shown).not.toContain(key.slice(6))
    expect(shown).not.toContain('postgres://')
  })

  it('maskCredentials masks passwords and lone user parts of every URL in a text, and nothing else', () => {
    expect(maskCredentials('to https://u:p%40ss@h.example/x?q=1 and postgres://app:s3cret@db:5432/app')).toBe(
      'to https://u:***@h.example/x?q=1 and postgres://app:***@db:5432/app',
    )
    expect(maskCredentials('https://tok3n@h.example/x')).toBe('https://***@h.example/x')
    expect(maskCredentials('mail ops@example.com about https://h.example/a@b')).toBe(
      'mail ops@example.com about https://h.example/a@b',
    )
  })
})
