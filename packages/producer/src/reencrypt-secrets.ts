import type { Kysely } from 'kysely'
import { invalidOption } from './errors.js'
import { resolveSchema } from './schema-name.js'
import { isEncryptedSecret, openSecret, sealSecret, secretKeyId } from './secret-envelope.js'
import { resolveSecretKeys, type SecretKeys } from './secret-keys.js'
import { rewriteSecretBatch } from './sql/secret-batch.js'

/** Default of {@link ReencryptSecretsOptions.batchSize}. */
export const DEFAULT_REENCRYPT_BATCH_SIZE = 500

/** Options of {@link reencryptSecrets}. */
export interface ReencryptSecretsOptions {
  /** The keys: the first encrypts, every one decrypts (see {@link SecretKeys}). Required. */
  readonly secretKeys: SecretKeys
  /** Secrets rewritten per transaction. @defaultValue 500 */
  readonly batchSize?: number
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** Called after every batch, for progress output. */
  readonly onBatch?: (progress: ReencryptSecretsResult) => void
}

/** What {@link reencryptSecrets} did (running totals while `onBatch` reports progress). */
export interface ReencryptSecretsResult {
  /** Secrets read. */
  readonly examined: number
  /** Plaintext secrets now encrypted under the first key. */
  readonly encrypted: number
  /** Secrets encrypted under another key now encrypted under the first. */
  readonly reencrypted: number
  /** Secrets already under the first key, left as they were. */
  readonly unchanged: number
}

/**
 * Puts every stored subscription secret under the first of `secretKeys`: plaintext secrets are encrypted, those
 * under an older key are decrypted and encrypted again, those already under the first key are left alone. It runs
 * in batches of `batchSize`, each its own short transaction, and is idempotent: run it again after a failure, or
 * after adding a new first key, and it converts what is left. Once it has run, keys other than the first can be
 * removed from every relay's `secretKeys`.
 *
 * Secrets a relay signs with are read on its refresh (about two seconds), so relays keep signing throughout,
 * provided they are given every key in use (the new one included) BEFORE this runs.
 *
 * Throws `ERR_OUTBOX_SECRET_UNREADABLE` naming the key id and the subscription when a secret is encrypted under a
 * key not given (add it back and run again: the batches before it are done).
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { reencryptSecrets } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const result = await reencryptSecrets(db, { secretKeys: process.env.OUTBOX_SECRET_KEYS ?? '' })
 * console.log(`${result.encrypted} encrypted, ${result.reencrypted} re-encrypted, ${result.unchanged} unchanged`)
 * ```
 */
export async function reencryptSecrets(
  db: Kysely<any>,
  options: ReencryptSecretsOptions,
): Promise<ReencryptSecretsResult> {
  const keyring = resolveSecretKeys(options?.secretKeys)
  if (keyring === undefined) {
    throw invalidOption(
      'secretKeys',
      undefined,
      (spell) =>
        `${spell('secretKeys')} is required: the keys to encrypt with ('id:base64', the first encrypts), e.g. k1: + the output of openssl rand -base64 32`,
    )
  }
  const batchSize = options.batchSize ?? DEFAULT_REENCRYPT_BATCH_SIZE
  if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    throw invalidOption(
      'batchSize',
      options.batchSize,
      (spell, got) => `${spell('batchSize')} must be an integer from 1 to 10000, got ${got}`,
    )
  }
  const ctx = { db, schema: resolveSchema(options.schema) }
  const totals = { examined: 0, encrypted: 0, reencrypted: 0, unchanged: 0 }
  let afterId = '0'
  for (;;) {
    const { rows } = await rewriteSecretBatch(ctx, {
      afterId,
      limit: batchSize,
      rewrite: (row) => {
        if (secretKeyId(row.secret) === keyring.primary.id) {
          // Opened anyway: a value under the right id that does not authenticate must fail the run, not pass as done.
          openSecret(keyring, row.subscription_id, row.secret)
          totals.unchanged += 1
          return undefined
        }
        if (isEncryptedSecret(row.secret)) totals.reencrypted += 1
        else totals.encrypted += 1
        return sealSecret(keyring, row.subscription_id, openSecret(keyring, row.subscription_id, row.secret))
      },
    })
    totals.examined += rows.length
    if (rows.length > 0) options.onBatch?.({ ...totals })
    if (rows.length < batchSize) break
    afterId = rows[rows.length - 1]!.id
  }
  return { ...totals }
}
