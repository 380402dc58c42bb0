import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'
import { OutboxError } from './errors.js'
import type { SecretKeyring } from './secret-keys.js'

/**
 * The prefix of an encrypted secret as stored: `enc:v1:<keyId>:<base64(iv ‖ ciphertext ‖ tag)>`. A plaintext secret
 * starts with `whsec_`, so the two never mix up, and rows written before encryption was turned on keep working.
 */
export const ENCRYPTED_SECRET_PREFIX = 'enc:v1:'

const IV_BYTES = 12
const TAG_BYTES = 16

/**
 * The associated data of a subscription's secret: its id. GCM authenticates it with the ciphertext, so a ciphertext
 * copied onto another subscription's row (by someone who can write the table but holds no key) fails to decrypt
 * instead of making that subscription sign with the first one's secret.
 */
function associatedData(subscriptionId: string): Buffer {
  return Buffer.from(`outbox subscription secret ${subscriptionId.toLowerCase()}`, 'utf8')
}

/** Whether a stored secret is encrypted (else it is the plaintext `whsec_…`). */
export function isEncryptedSecret(stored: string): boolean {
  return stored.startsWith(ENCRYPTED_SECRET_PREFIX)
}

/** The id of the key an encrypted secret was sealed under; undefined for a plaintext one. */
export function secretKeyId(stored: string): string | undefined {
  if (!isEncryptedSecret(stored)) return undefined
  const rest = stored.slice(ENCRYPTED_SECRET_PREFIX.length)
  const colon = rest.indexOf(':')
  return colon < 0 ? undefined : rest.slice(0, colon)
}

/**
 * Encrypts a subscription's signing secret under the keyring's first key (AES-256-GCM, a random 12-byte IV, the
 * subscription id as associated data), in the form stored in `outbox_subscription_secret.secret`.
 */
export function sealSecret(keyring: SecretKeyring, subscriptionId: string, secret: string): string {
  const { id, key } = keyring.primary
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES })
  cipher.setAAD(associatedData(subscriptionId))
  const sealed = Buffer.concat([iv, cipher.update(secret, 'utf8'), cipher.final(), cipher.getAuthTag()])
  return `${ENCRYPTED_SECRET_PREFIX}${id}:${sealed.toString('base64')}`
}

function unreadable(subscriptionId: string, why: string, cause?: unknown): OutboxError {
  return new OutboxError(
    'ERR_OUTBOX_SECRET_UNREADABLE',
    `the signing secret of subscription ${subscriptionId} ${why}`,
    cause === undefined ? undefined : { cause },
  )
}

/**
 * A stored secret as the relay signs with it: a plaintext one as it is, an encrypted one decrypted with the key its
 * id names. Throws `ERR_OUTBOX_SECRET_UNREADABLE` naming the key id when no keys are given, the id is not among
 * them, or the ciphertext does not authenticate (another key under that id, a damaged value, or a value moved from
 * another subscription's row). The message never shows the secret or a key.
 */
export function openSecret(
  keyring: SecretKeyring | undefined,
  subscriptionId: string,
  stored: string,
): string {
  if (!isEncryptedSecret(stored)) return stored
  const keyId = secretKeyId(stored)
  if (keyId === undefined) {
    throw unreadable(subscriptionId, 'is stored encrypted but malformed (no key id): rotate it')
  }
  if (keyring === undefined) {
    throw unreadable(
      subscriptionId,
      `is encrypted with key ${JSON.stringify(keyId)}, and no secret keys were given: set OUTBOX_SECRET_KEYS (the secretKeys option) with that key`,
    )
  }
  const entry = keyring.byId.get(keyId)
  if (entry === undefined) {
    throw unreadable(
      subscriptionId,
      `is encrypted with key ${JSON.stringify(keyId)}, which is not among the secret keys given (${[...keyring.byId.keys()].join(', ')}): add that key back to OUTBOX_SECRET_KEYS`,
    )
  }
  const sealed = Buffer.from(stored.slice(ENCRYPTED_SECRET_PREFIX.length + keyId.length + 1), 'base64')
  if (sealed.length < IV_BYTES + TAG_BYTES + 1) {
    throw unreadable(
      subscriptionId,
      `is stored encrypted with key ${JSON.stringify(keyId)} but truncated: rotate it`,
    )
  }
  try {
    const decipher = createDecipheriv('aes-256-gcm', entry.key, sealed.subarray(0, IV_BYTES), {
      authTagLength: TAG_BYTES,
    })
    decipher.setAAD(associatedData(subscriptionId))
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES))
    return Buffer.concat([
      decipher.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES)),
      decipher.final(),
    ]).toString('utf8')
  } catch (error) {
    throw unreadable(
      subscriptionId,
      `does not decrypt with key ${JSON.stringify(keyId)}: that id holds other key material than the one that encrypted it, or the value was altered or copied from another subscription`,
      error,
    )
  }
}
