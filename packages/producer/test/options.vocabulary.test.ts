import { describe, expect, it } from 'vitest'
import type { OutboxError } from '../src/index.js'
import { resolveRelayOptions } from '../src/options.js'

// A stand-in for Kysely: option checks only look for selectFrom, and these tests never reach the database.
const db = { selectFrom: () => {} } as never
const SECRET = `whsec_${Buffer.from('a secret of enough bytes').toString('base64')}`

function refusal(options: object): OutboxError {
  try {
    resolveRelayOptions({ db, endpoint: 'http://127.0.0.1/hooks', ...options })
  } catch (error) {
    return error as OutboxError
  }
  throw new Error('expected the options to be refused')
}

describe('Relay options', () => {
  it('refuses an unknown option, naming it', () => {
    const error = refusal({ secrets: SECRET })
    expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
    expect(error.option).toBe('secrets')
    expect(error.message).toMatch(/unknown option secrets; known options are db, endpoint, secret/)
  })

  it('takes secret, and signingSecret as its deprecated name, but not both', () => {
    expect(resolveRelayOptions({ db, endpoint: 'http://x/h', secret: SECRET }).signingKeys).toHaveLength(1)
    expect(
      resolveRelayOptions({ db, endpoint: 'http://x/h', signingSecret: SECRET }).signingKeys,
    ).toHaveLength(1)
    const both = refusal({ secret: SECRET, signingSecret: SECRET })
    expect(both.option).toBe('signingSecret')
    expect(both.message).toMatch(/give secret only/)
    expect(refusal({ secret: 'plain' }).option).toBe('secret')
  })

  it('names the option of every refusal, and writes it with other names on request', () => {
    const error = refusal({ concurrency: 0 })
    expect(error.option).toBe('concurrency')
    expect(error.message).toBe('concurrency must be an integer from 1 to 1000, got 0')
    expect(error.describe((option) => `--${option}`, '"0"')).toBe(
      '--concurrency must be an integer from 1 to 1000, got "0"',
    )
    const lease = refusal({ leaseMs: 1000, requestTimeoutMs: 900 })
    expect(lease.option).toBe('requestTimeoutMs')
    expect(lease.describe((option) => option.toUpperCase())).toMatch(
      /^REQUESTTIMEOUTMS \(900\).* below LEASEMS \(1000\)/,
    )
  })
})
