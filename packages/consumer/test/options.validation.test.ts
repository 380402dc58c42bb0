import { randomBytes } from 'node:crypto'
import type { OutboxEvent } from '@outbox/protocol'
import { useTestDatabase } from '@outbox/test-harness'
import type { Transaction } from 'kysely'
import pg from 'pg'
import { describe, expect, expectTypeOf, it } from 'vitest'
import { type ConsumerOptions, createConsumer, guardPool, OutboxError } from '../src/index.js'
import { resolveConsumerOptions } from '../src/options.js'
import { newSecret, quiet, recordingLogger } from './support.js'

const t = useTestDatabase()

function refusal(options: unknown): OutboxError {
  try {
    createConsumer(options as ConsumerOptions)
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxError)
    return error as OutboxError
  }
  throw new Error('createConsumer accepted the options')
}

describe('createConsumer checks its options once, with messages that say what to do', () => {
  it('refuses a missing or wrong db', () => {
    for (const db of [undefined, null, {}, 'postgres://x']) {
      const error = refusal({ db, logger: quiet })
      expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
      expect(error.message).toMatch(/Kysely instance/)
    }
  })

  it('refuses a transaction as db', async () => {
    await t.db.transaction().execute(async (trx) => {
      const error = refusal({ db: trx, logger: quiet })
      expect(error.message).toMatch(/transaction; pass the Kysely instance/)
    })
  })

  it('refuses a malformed secret without echoing it, keeping the protocol error as cause', () => {
    for (const secret of ['', 'plain-text-secret-value', 'whsec_***not-base64***', []]) {
      const error = refusal({ db: t.db, secret, logger: quiet })
      expect(error.code).toBe('ERR_OUTBOX_INVALID_SECRET')
      expect(error.cause).toBeDefined()
      if (typeof secret === 'string' && secret.length > 0) expect(error.message).not.toContain(secret)
    }
    const rotation = refusal({ db: t.db, secret: [newSecret(), 'nope'], logger: quiet })
    expect(rotation.message).toMatch(/#2/)
  })

  it('refuses a secret shorter than the Standard Webhooks minimum of 24 bytes, saying how to make one', () => {
    const short = `whsec_${randomBytes(23).toString('base64')}`
    const error = refusal({ db: t.db, secret: short, logger: quiet })
    expect(error.code).toBe('ERR_OUTBOX_INVALID_SECRET')
    expect(error.message).toBe(
      'createConsumer: signing secret is 23 bytes long; Standard Webhooks secrets need at least 24 random bytes: generate one with: echo "whsec_$(openssl rand -base64 32)"',
    )
    expect(refusal({ db: t.db, secret: [newSecret(), short], logger: quiet }).message).toMatch(
      /signing secret #2 is 23 bytes long/,
    )
  })

  it('refuses unknown options, so a typo cannot silently turn signature checks off', () => {
    const error = refusal({ db: t.db, secrets: [newSecret()], logger: quiet })
    expect(error.message).toMatch(/unknown option `secrets`/)
    expect(error.message).toMatch(/secret/)
  })

  it('refuses a bad sequence policy, and firstSequence outside strict', () => {
    expect(refusal({ db: t.db, allowUnsigned: true, sequence: 'ordered', logger: quiet }).message).toMatch(
      /'monotonic', 'strict' or 'off'/,
    )
    expect(
      refusal({ db: t.db, allowUnsigned: true, sequence: 'strict', firstSequence: 0, logger: quiet }).message,
    ).toMatch(/1 or 'any'/)
    expect(refusal({ db: t.db, allowUnsigned: true, firstSequence: 'any', logger: quiet }).message).toMatch(
      /only applies to sequence: 'strict'/,
    )
  })

  it('refuses bad limits, tolerance, logger and onError', () => {
    for (const maxBodyBytes of [0, -1, 1.5, Number.NaN, '1mb']) {
      expect(refusal({ db: t.db, allowUnsigned: true, maxBodyBytes, logger: quiet }).message).toMatch(
        /maxBodyBytes/,
      )
    }
    for (const option of ['bodyTimeoutMs', 'maxConcurrentBodies', 'largeBodyBytesPerSecond']) {
      for (const value of [0, -1, 1.5, '32mb']) {
        expect(refusal({ db: t.db, allowUnsigned: true, logger: quiet, [option]: value }).message).toMatch(
          new RegExp(`\`${option}\` must be a positive whole number`),
        )
      }
    }
    for (const toleranceSeconds of [0, -10, Number.POSITIVE_INFINITY]) {
      expect(refusal({ db: t.db, allowUnsigned: true, toleranceSeconds, logger: quiet }).message).toMatch(
        /toleranceSeconds/,
      )
    }
    expect(refusal({ db: t.db, allowUnsigned: true, logger: { info: () => {} } }).message).toMatch(
      /debug, info, warn and error/,
    )
    expect(refusal({ db: t.db, allowUnsigned: true, logger: quiet, onError: 'log' }).message).toMatch(
      /onError/,
    )
    expect(refusal({ db: t.db, allowUnsigned: true, logger: quiet, schema: '' }).message).toMatch(/schema/)
  })

  it('refuses to run without authentication unless the app says so with allowUnsigned: true', () => {
    const error = refusal({ db: t.db, logger: quiet })
    expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
    expect(error.message).toMatch(/allowUnsigned: true/)
    expect(refusal({ db: t.db, logger: quiet, secret: newSecret(), allowUnsigned: true }).message).toMatch(
      /cannot go with `secret`/,
    )
  })

  it('refuses a handler that is not a function', () => {
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet })
    expect(() => dedupe(undefined as never)).toThrow(/dedupe: pass the handler/)
  })

  it('resolves defaults into a frozen object', () => {
    const resolved = resolveConsumerOptions({ db: t.db, allowUnsigned: true, logger: quiet })
    expect(resolved).toMatchObject({
      sequence: 'monotonic',
      firstSequence: 1,
      maxBodyBytes: 1_048_576,
      largeBodyBytesPerSecond: 33_554_432,
      toleranceSeconds: 300,
      keys: undefined,
      source: 'default',
      verifier: undefined,
      schemas: undefined,
      schema: 'public', // the default moved from the search_path to 'public' (issue 16)
    })
    expect(Object.isFrozen(resolved)).toBe(true)
  })

  it('warns once at creation when there is no secret, or when the body limit is below the producer default', () => {
    guardPool(new pg.Pool()) // the process has a guarded pool: the unguarded-pool warning is another test's
    const logger = recordingLogger()
    createConsumer({ db: t.db, allowUnsigned: true, logger, maxBodyBytes: 1000 })
    expect(logger.lines.map((line) => line.level)).toEqual(['warn', 'warn'])
    expect(logger.lines.map((line) => line.msg).join(' ')).toMatch(/no signing secret.*|maxBodyBytes/)
    const signedLogger = recordingLogger()
    createConsumer({ db: t.db, logger: signedLogger, secret: newSecret() })
    expect(signedLogger.lines).toEqual([])
  })
})

describe('types', () => {
  it('types the event data and the transaction', () => {
    interface Db {
      orders: { id: string; status: string }
    }
    const { dedupe } = createConsumer<Db>({ db: t.db, allowUnsigned: true, logger: quiet })
    dedupe<{ order_id: string; status: string }>(async (event, trx, req) => {
      expectTypeOf(event).toEqualTypeOf<OutboxEvent<{ order_id: string; status: string }>>()
      expectTypeOf(trx).toEqualTypeOf<Transaction<Db>>()
      expectTypeOf(req.headers).toBeObject()
      // @ts-expect-error `total` is not part of the declared data
      event.data.total
      // @ts-expect-error the table does not exist in Db
      await trx.selectFrom('invoices').selectAll().execute()
    })
    // @ts-expect-error not a policy
    const bad: ConsumerOptions = { db: t.db, sequence: 'ordered' }
    expect(bad).toBeDefined()
  })
})
