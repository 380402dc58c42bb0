import { randomBytes, randomUUID } from 'node:crypto'
import { HEADERS } from '@outbox/protocol'
import { type Sink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  enqueue,
  listSubscriptions,
  reencryptSecrets,
  rotateSubscriptionSecret,
} from '../src/index.js'
import { openSecret, sealSecret } from '../src/secret-envelope.js'
import { resolveSecretKeys } from '../src/secret-keys.js'
import { useStoredSubscriptions } from './stored-subscriptions.js'
import { waitFor } from './support.js'

const t = useTestDatabase()
const stored = useStoredSubscriptions(t, { pollIntervalMs: 50 })

const key = (id: string) => `${id}:${randomBytes(32).toString('base64')}`
const K1 = key('k1')
const K2 = key('k2')

async function storedSecrets(id: string): Promise<string[]> {
  const { rows } = await sql<{ secret: string }>`
    SELECT secret FROM outbox_subscription_secret WHERE subscription_id = ${id}::uuid ORDER BY id`.execute(
    t.db,
  )
  return rows.map((row) => row.secret)
}

async function publish(aggregateId: string) {
  await t.db
    .transaction()
    .execute((trx) =>
      enqueue(trx, { aggregateType: 'order', aggregateId, eventType: 'order.updated', payload: {} }),
    )
}

function verifies(secret: string, request: Sink['requests'][number]): boolean {
  try {
    new Webhook(secret).verify(request.body, {
      'webhook-id': request.headers[HEADERS.webhookId] as string,
      'webhook-timestamp': request.headers[HEADERS.webhookTimestamp] as string,
      'webhook-signature': request.headers[HEADERS.webhookSignature] as string,
    })
    return true
  } catch {
    return false
  }
}

describe('secret keys', () => {
  it('are checked with errors that name the entry and never show key material', () => {
    const refused = (keys: unknown) => {
      try {
        resolveSecretKeys(keys)
      } catch (error) {
        expect(error).toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'secretKeys' })
        return (error as Error).message
      }
      throw new Error('accepted')
    }
    expect(refused(`k1:${Buffer.alloc(16).toString('base64')}`)).toMatch(
      /key "k1" is 16 bytes: AES-256 needs exactly 32/,
    )
    expect(refused('k1:not*base64!')).toMatch(/key "k1" is not valid base64/)
    expect(refused(`${K1},${K1}`)).toMatch(/the key id "k1" is given twice/)
    expect(refused(randomBytes(32).toString('base64'))).toMatch(/entry 1 has no id/)
    expect(refused(`bad id:${randomBytes(32).toString('base64')}`)).toMatch(/entry 1 has the id "bad id"/)
    expect(refused(42)).toMatch(/comma-separated string or an array/)
    const material = K1.slice(3)
    expect(refused(`${K1},k2:${material.slice(0, 20)}`)).not.toContain(material.slice(0, 20))
    expect(resolveSecretKeys(undefined)).toBeUndefined()
    expect(resolveSecretKeys(' ')).toBeUndefined()
    const ring = resolveSecretKeys(` ${K2} , ${K1} `)!
    expect(ring.primary.id).toBe('k2')
    expect([...ring.byId.keys()]).toEqual(['k2', 'k1'])
  })

  it('seal under the first key with the subscription id bound in, and open under any key given', () => {
    const id = randomUUID()
    const secret = `whsec_${randomBytes(32).toString('base64')}`
    const sealed = sealSecret(resolveSecretKeys(K1)!, id, secret)
    expect(sealed).toMatch(/^enc:v1:k1:[A-Za-z0-9+/]+=*$/)
    expect(sealed).not.toContain(secret.slice(6, 20))
    // A random IV: the same secret never seals to the same text twice.
    expect(sealSecret(resolveSecretKeys(K1)!, id, secret)).not.toBe(sealed)
    expect(openSecret(resolveSecretKeys([K2, K1]), id, sealed)).toBe(secret)
    expect(openSecret(undefined, id, secret)).toBe(secret)
    const unreadable = (run: () => unknown) => {
      try {
        run()
      } catch (error) {
        expect(error).toMatchObject({ code: 'ERR_OUTBOX_SECRET_UNREADABLE' })
        expect((error as Error).message).not.toContain(secret)
        return (error as Error).message
      }
      throw new Error('opened')
    }
    // Moved to another subscription's row: the associated data differs, GCM refuses it.
    expect(unreadable(() => openSecret(resolveSecretKeys(K1), randomUUID(), sealed))).toMatch(
      /does not decrypt with key "k1".*copied from another subscription/,
    )
    expect(unreadable(() => openSecret(resolveSecretKeys(K2), id, sealed))).toMatch(
      /encrypted with key "k1", which is not among the secret keys given \(k2\)/,
    )
    expect(unreadable(() => openSecret(undefined, id, sealed))).toMatch(
      /encrypted with key "k1", and no secret keys were given: set OUTBOX_SECRET_KEYS/,
    )
    // Other key material under the same id, and a flipped byte, fail authentication.
    expect(unreadable(() => openSecret(resolveSecretKeys(key('k1')), id, sealed))).toMatch(/does not decrypt/)
    const tampered = `${sealed.slice(0, -6)}${sealed.slice(-6, -5) === 'A' ? 'B' : 'A'}${sealed.slice(-5)}`
    expect(unreadable(() => openSecret(resolveSecretKeys(K1), id, tampered))).toMatch(/does not decrypt/)
  })
})

describe('secrets encrypted at rest', () => {
  it('createSubscription and rotateSubscriptionSecret store ciphertext; a relay with the keys signs with the secret', async () => {
    const target = await stored.sink()
    const { id, secret } = await createSubscription(
      t.db,
      { url: target.url, name: 'enc' },
      { secretKeys: K1 },
    )
    const [row] = await storedSecrets(id)
    expect(row).toMatch(/^enc:v1:k1:/)
    expect(row).not.toContain(secret.slice(6))
    // Listing reads only the secrets' dates, whatever they hold.
    expect((await listSubscriptions(t.db)).find((s) => s.id === id)?.secretCreatedAt).toBeInstanceOf(Date)

    await publish('e1')
    const before = stored.relay({ secretKeys: K1 })
    await before.start()
    await waitFor(() => target.requests.length === 1, 'the encrypted subscription delivered')
    expect(verifies(secret, target.requests[0]!)).toBe(true)
    // It caches what it read for a refresh interval: the next delivery must come from a relay that read the rotation.
    await before.stop()

    const rotated = await rotateSubscriptionSecret(t.db, id, { secretKeys: [K2, K1] })
    expect(await storedSecrets(id)).toEqual([row, expect.stringMatching(/^enc:v1:k2:/)])
    const relay = stored.relay({ secretKeys: [K2, K1] })
    await relay.start()
    await publish('e2')
    await waitFor(() => target.requests.length === 2, 'delivered after the rotation')
    // Both secrets of the overlap sign, one decrypted under each key.
    expect(verifies(rotated.secret, target.requests[1]!)).toBe(true)
    expect(verifies(secret, target.requests[1]!)).toBe(true)
  })

  it('a relay skips a subscription whose key it lacks, says so once naming the key id, and serves the others', async () => {
    const [locked, plain] = [await stored.sink(), await stored.sink()]
    await createSubscription(t.db, { url: locked.url, name: 'locked' }, { secretKeys: K2 })
    const open = await createSubscription(t.db, { url: plain.url, name: 'plain' })
    const relay = stored.relay({ secretKeys: K1, pollIntervalMs: 20 })
    const skipped: { name: string; reason: string }[] = []
    relay.on('subscription:skipped', (event) => skipped.push(event))
    await relay.start()
    for (let n = 0; n < 3; n++) await publish(`s${n}`)
    await waitFor(() => plain.requests.length === 3, 'the plaintext subscription served')
    // Past a refresh or two (every 2 s): still one report.
    await new Promise((resolve) => setTimeout(resolve, 2_500))
    expect(locked.requests).toHaveLength(0)
    expect(skipped).toEqual([
      {
        subscriptionId: expect.any(String),
        name: 'locked',
        reason: expect.stringMatching(
          /encrypted with key "k2", which is not among the secret keys given \(k1\)/,
        ),
      },
    ])
    expect(verifies(open.secret, plain.requests[0]!)).toBe(true)
    expect(relay.running).toBe(true)
  })

  it('reencryptSecrets encrypts plaintext rows, moves older keys onto the first, in batches, idempotently', async () => {
    const a = await createSubscription(t.db, { url: 'https://a.example/hooks', name: 're-a' })
    const b = await createSubscription(
      t.db,
      { url: 'https://b.example/hooks', name: 're-b' },
      { secretKeys: K1 },
    )
    await rotateSubscriptionSecret(t.db, a.id, { secretKeys: K1 })
    await createSubscription(t.db, { url: 'https://c.example/hooks', name: 're-c' })
    const batches: number[] = []
    const first = await reencryptSecrets(t.db, {
      secretKeys: [K2, K1],
      batchSize: 2,
      onBatch: (progress) => batches.push(progress.examined),
    })
    // a: plaintext + k1; b: k1; c: plaintext.
    expect(first).toEqual({ examined: 4, encrypted: 2, reencrypted: 2, unchanged: 0 })
    expect(batches).toEqual([2, 4])
    const { rows } = await sql<{ subscription_id: string; secret: string }>`
      SELECT subscription_id, secret FROM outbox_subscription_secret`.execute(t.db)
    expect(rows.every((row) => row.secret.startsWith('enc:v1:k2:'))).toBe(true)
    const ring = resolveSecretKeys(K2)!
    const opened = rows.map((row) => openSecret(ring, row.subscription_id, row.secret))
    expect(opened).toContain(a.secret)
    expect(opened).toContain(b.secret)
    expect(await reencryptSecrets(t.db, { secretKeys: [K2, K1] })).toEqual({
      examined: 4,
      encrypted: 0,
      reencrypted: 0,
      unchanged: 4,
    })
    await expect(reencryptSecrets(t.db, { secretKeys: K1 })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_SECRET_UNREADABLE',
      message: expect.stringMatching(/key "k2", which is not among the secret keys given \(k1\)/),
    })
    await expect(reencryptSecrets(t.db, { secretKeys: '' })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'secretKeys',
    })
  })
})
