import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { type ConsoleCliOptions, parseConsoleCli } from '../src/cli-options.js'

const TOKEN = 'K7q9Zr2mXv4Bn8Lp3Wd6Tc1Y'
const DB = 'postgres://outbox@db.internal:5432/app'
const dir = mkdtempSync(join(tmpdir(), 'console-cli-'))

function file(name: string, text: string): string {
  const path = join(dir, name)
  writeFileSync(path, text)
  chmodSync(path, 0o600)
  return path
}

function parsed(argv: string[], env: NodeJS.ProcessEnv = {}): ConsoleCliOptions {
  const options = parseConsoleCli(argv, { DATABASE_URL: DB, ...env })
  if (options === 'help') throw new Error('help')
  return options
}

describe('outbox-console flags', () => {
  it('refuses a token shorter than 22 characters or with fewer than 16 distinct ones', () => {
    expect(() => parsed(['--actor', 'ops'], { OUTBOX_CONSOLE_TOKEN: 'passwordpassword' })).toThrow(
      /too weak: it has 16 characters; at least 22/,
    )
    expect(() =>
      parsed(['--actor', 'ops'], { OUTBOX_CONSOLE_TOKEN: 'abcabcabcabcabcabcabcabcabcabc' }),
    ).toThrow(/only 3 distinct characters; at least 16/)
    expect(parsed(['--actor', 'ops'], { OUTBOX_CONSOLE_TOKEN: TOKEN }).tokens).toEqual([
      { actor: 'ops', token: TOKEN },
    ])
  })

  it('reads tokens from --token-file, each line optionally named, and never echoes one', () => {
    const path = file('tokens', `# operators\nalice:${TOKEN}\n\n${TOKEN.split('').reverse().join('')}\n`)
    const options = parsed(['--token-file', path, '--actor', 'oncall'])
    expect(options.tokens).toEqual([
      { actor: 'alice', token: TOKEN },
      { actor: 'oncall', token: TOKEN.split('').reverse().join('') },
    ])
    expect(options.warnings).toEqual([])
    const weak = file('weak', 'bob:passwordpassword\n')
    expect(() => parsed(['--token-file', weak])).toThrow(/--token-file line 1 is too weak/)
    try {
      parsed(['--token-file', weak])
    } catch (error) {
      expect((error as Error).message).not.toContain('passwordpassword')
    }
  })

  it('needs a named actor: --actor, OUTBOX_CONSOLE_ACTOR, or a name in the token file', () => {
    expect(() => parsed([], { OUTBOX_CONSOLE_TOKEN: TOKEN })).toThrow(/--actor <name>/)
    expect(parsed([], { OUTBOX_CONSOLE_TOKEN: TOKEN, OUTBOX_CONSOLE_ACTOR: 'ops' }).tokens[0]?.actor).toBe(
      'ops',
    )
  })

  it('warns about a token on the command line', () => {
    expect(parsed(['--token', TOKEN, '--actor', 'ops']).warnings).toEqual([
      expect.stringMatching(/--token on the command line is shown by ps.*--token-file/),
    ])
  })

  it('refuses a password in --database-url, as the relay does, and reads the URL from a file', () => {
    const env = { OUTBOX_CONSOLE_TOKEN: TOKEN, OUTBOX_CONSOLE_ACTOR: 'ops', DATABASE_URL: '' }
    expect(() => parsed(['--database-url', 'postgres://outbox:s3cret@db/app'], env)).toThrow(
      /--database-url holds a password.*DATABASE_URL or --database-url-file/,
    )
    expect(parsed(['--database-url', DB], env).databaseUrl).toBe(DB)
    const withPassword = 'postgres://outbox:s3cret@db/app'
    expect(parsed(['--database-url-file', file('url', `${withPassword}\n`)], env).databaseUrl).toBe(
      withPassword,
    )
  })

  it('takes --trust-proxy', () => {
    const env = { OUTBOX_CONSOLE_TOKEN: TOKEN, OUTBOX_CONSOLE_ACTOR: 'ops' }
    expect(parsed(['--trust-proxy'], env).trustProxy).toBe(true)
    expect(parsed([], env).trustProxy).toBe(false)
  })
})
