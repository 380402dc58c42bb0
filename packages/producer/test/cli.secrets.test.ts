import { randomBytes } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Webhook } from 'standardwebhooks'
import { beforeAll, describe, expect, it } from 'vitest'
import { disableSubscription, enqueue, IMPLICIT_SUBSCRIPTION_ID } from '../src/index.js'
import { openSecret } from '../src/secret-envelope.js'
import { resolveSecretKeys } from '../src/secret-keys.js'
import { buildCli, cliEnv, expectFailure, runCli, startCli } from './cli-process.js'

const t = useTestDatabase()
const key = (id: string) => `${id}:${randomBytes(32).toString('base64')}`

beforeAll(() => {
  buildCli()
}, 120_000)

async function storedSecrets(): Promise<{ subscription_id: string; secret: string }[]> {
  const { rows } = await sql<{ subscription_id: string; secret: string }>`
    SELECT subscription_id, secret FROM outbox_subscription_secret ORDER BY id`.execute(t.db)
  return rows
}

describe.sequential('outbox secrets reencrypt, and OUTBOX_SECRET_KEYS on subscriptions', () => {
  it('create stores the secret encrypted under the first key; reencrypt converts plaintext and older keys, then finds nothing to do', async () => {
    const [k1, k2] = [key('k1'), key('k2')]
    const plain = await runCli(
      ['subscriptions', 'create', '--url', 'https://p.example/hooks', '--name', 'cli-plain', '--json'],
      cliEnv({ DATABASE_URL: t.url }),
    )
    expect(plain, plain.stderr).toMatchObject({ code: 0 })
    const sealed = await runCli(
      ['subscriptions', 'create', '--url', 'https://s.example/hooks', '--name', 'cli-sealed', '--json'],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SECRET_KEYS: k1 }),
    )
    expect(sealed, sealed.stderr).toMatchObject({ code: 0 })
    const created = JSON.parse(sealed.stdout) as { id: string; secret: string }
    const [plainRow, sealedRow] = await storedSecrets()
    expect(plainRow?.secret).toBe(JSON.parse(plain.stdout).secret)
    expect(sealedRow?.secret).toMatch(/^enc:v1:k1:/)

    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SECRET_KEYS: `${k2},${k1}` })
    const first = await runCli(['secrets', 'reencrypt', '--batch-size', '1', '--json'], env)
    expect(first, first.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(first.stdout)).toEqual({ examined: 2, encrypted: 1, reencrypted: 1, unchanged: 0 })
    expect(first.stderr).toMatch(/^secrets reencrypt: 1 secrets: .* so far$/m)
    const rows = await storedSecrets()
    expect(rows.every((row) => row.secret.startsWith('enc:v1:k2:'))).toBe(true)
    const opened = rows.map((row) => openSecret(resolveSecretKeys(k2), row.subscription_id, row.secret))
    expect(opened).toContain(created.secret)
    expect(first.stdout + first.stderr).not.toContain(created.secret)

    const again = await runCli(['secrets', 'reencrypt'], env)
    expect(again.stdout).toBe(
      '2 secrets: 0 encrypted (were plaintext), 0 re-encrypted under the first key, 2 already under it; done\n',
    )
  })

  it('refuses bad keys under OUTBOX_SECRET_KEYS, missing keys, and names the key a secret needs', async () => {
    const env = (keys: string | undefined) => cliEnv({ DATABASE_URL: t.url, OUTBOX_SECRET_KEYS: keys })
    expectFailure(await runCli(['secrets', 'reencrypt'], env(undefined)), 2, /set OUTBOX_SECRET_KEYS/)
    expectFailure(
      await runCli(['secrets', 'reencrypt'], env(`k1:${randomBytes(16).toString('base64')}`)),
      2,
      /^outbox: OUTBOX_SECRET_KEYS: key "k1" is 16 bytes: AES-256 needs exactly 32/,
    )
    expectFailure(
      await runCli(
        ['subscriptions', 'create', '--url', 'https://x.example/h'],
        env(`${key('a')},${key('a')}`),
      ),
      2,
      /OUTBOX_SECRET_KEYS: the key id "a" is given twice/,
    )
    // Every secret is now under k2 (the test above): a run with k9 only must say which key it needs.
    expectFailure(
      await runCli(['secrets', 'reencrypt'], env(key('k9'))),
      1,
      /encrypted with key "k2", which is not among the secret keys given \(k9\): add that key back/,
    )
    expectFailure(await runCli(['secrets', 'rotate'], env(key('k9'))), 2, /use outbox secrets reencrypt/)
  })

  it('outbox relay decrypts with OUTBOX_SECRET_KEYS_FILE and signs with the secret; without the key it names it', async ({
    onTestFinished,
  }) => {
    const schema = 'cli_sealed'
    const k1 = key('k1')
    const keysFile = join(tmpdir(), `outbox-keys-${randomBytes(4).toString('hex')}`)
    writeFileSync(keysFile, `${k1}\n`)
    onTestFinished(() => rmSync(keysFile, { force: true }))
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema, OUTBOX_SECRET_KEYS_FILE: keysFile })
    expect((await runCli(['migrate'], env)).code).toBe(0)
    await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID, { schema })
    const sink = await startSink()
    try {
      const added = await runCli(
        ['subscriptions', 'create', '--url', sink.url, '--name', 'sealed', '--json'],
        env,
      )
      expect(added, added.stderr).toMatchObject({ code: 0 })
      const { secret } = JSON.parse(added.stdout)
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(
            trx,
            { aggregateType: 'order', aggregateId: 'c1', eventType: 'order.created', payload: {} },
            { schema },
          ),
        )
      const relayArgs = [
        'relay',
        '--log-format',
        'text',
        '--allow-private-networks',
        '--poll-interval',
        '50ms',
      ]
      const keyless = startCli(relayArgs, cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema }), {
        onTestFinished,
      })
      await keyless.waitFor(() => /subscription skipped/.test(keyless.stdout()), 'the skip warning')
      const stopped = await keyless.stop('SIGTERM')
      expect(stopped.stdout).toMatch(/encrypted with key \\?"k1\\?", and no secret keys were given/)
      expect(stopped.stdout + stopped.stderr).not.toContain(secret)
      expect(sink.requests).toHaveLength(0)

      const relay = startCli(relayArgs, env, { onTestFinished })
      await relay.waitFor(() => sink.requests.length === 1, 'the delivery')
      const request = sink.requests[0]!
      expect(() =>
        new Webhook(secret).verify(request.body, {
          'webhook-id': request.headers['webhook-id'] as string,
          'webhook-timestamp': request.headers['webhook-timestamp'] as string,
          'webhook-signature': request.headers['webhook-signature'] as string,
        }),
      ).not.toThrow()
      expect((await relay.stop('SIGTERM')).code).toBe(0)
    } finally {
      await sink.close()
    }
  })
})
