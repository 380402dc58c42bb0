import { invalidOption } from './errors.js'

/**
 * Keys that encrypt subscription signing secrets at rest: `id:base64` entries, each a 32-byte AES-256 key under a
 * short id, as one comma-separated string (the form of `OUTBOX_SECRET_KEYS`) or an array. The FIRST key encrypts;
 * every key decrypts. To rotate keys, put a new key first and keep the old ones until `reencryptSecrets` has moved
 * every secret onto the new one.
 *
 * @example
 * ```ts
 * import type { SecretKeys } from '@outbox/producer'
 * // openssl rand -base64 32
 * const secretKeys: SecretKeys = 'k2:8J3l0hQw0a5Yc1c2Q0u4cS0m3y4l5Vb6H7n8P9q0r1s=,k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8='
 * ```
 */
export type SecretKeys = string | readonly string[]

/** One key of a {@link SecretKeyring}. */
export interface SecretKey {
  /** The id written beside every secret it encrypts, so the right key is found again after a rotation. */
  readonly id: string
  /** 32 bytes of AES-256 key material. */
  readonly key: Buffer
}

/** {@link SecretKeys} checked: the key that encrypts, and every key by id. Built once, frozen. */
export interface SecretKeyring {
  /** The first key given: new and re-encrypted secrets are encrypted under it. */
  readonly primary: SecretKey
  /** Every key given, by id: any of them decrypts what it encrypted. */
  readonly byId: ReadonlyMap<string, SecretKey>
}

/** A key id: short, and without the `:` and `,` that separate the parts of the key list and of a stored secret. */
const KEY_ID = /^[A-Za-z0-9_.-]{1,32}$/
const KEY_BYTES = 32
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

/**
 * Checks {@link SecretKeys} once, with errors that name the entry at fault (by its id or position, never its key
 * material) under `option` (`'secretKeys'` for the library; the CLI maps it to `OUTBOX_SECRET_KEYS`). Undefined, an
 * empty string or an empty list mean no encryption: undefined is returned.
 */
export function resolveSecretKeys(keys: unknown, option = 'secretKeys'): SecretKeyring | undefined {
  if (keys === undefined || (typeof keys === 'string' && keys.trim() === '')) return undefined
  const refuse: (why: string) => never = (why) => {
    throw invalidOption(option, undefined, (spell) => `${spell(option)}: ${why}`)
  }
  let entries: readonly unknown[]
  if (typeof keys === 'string') entries = keys.split(',')
  else if (Array.isArray(keys)) entries = keys
  else {
    return refuse(
      "must be a comma-separated string or an array of 'id:base64' keys (32 random bytes each, e.g. openssl rand -base64 32)",
    )
  }
  const byId = new Map<string, SecretKey>()
  let primary: SecretKey | undefined
  for (const [index, entry] of entries.entries()) {
    const at = `entry ${index + 1}`
    if (typeof entry !== 'string') refuse(`${at} is not a string; each key is 'id:base64'`)
    const text = entry.trim()
    const colon = text.indexOf(':')
    if (colon < 0) {
      refuse(
        `${at} has no id: write each key as 'id:base64', e.g. 'k1:' + the output of openssl rand -base64 32`,
      )
    }
    const id = text.slice(0, colon)
    const material = text.slice(colon + 1)
    if (!KEY_ID.test(id)) {
      refuse(`${at} has the id ${JSON.stringify(id)}: a key id is 1 to 32 letters, digits, '_', '.' or '-'`)
    }
    if (byId.has(id)) {
      refuse(`the key id ${JSON.stringify(id)} is given twice: each key needs its own id`)
    }
    if (material.length === 0 || material.length % 4 !== 0 || !BASE64.test(material)) {
      refuse(`key ${JSON.stringify(id)} is not valid base64 (e.g. the output of openssl rand -base64 32)`)
    }
    const key = Buffer.from(material, 'base64')
    if (key.length !== KEY_BYTES) {
      refuse(
        `key ${JSON.stringify(id)} is ${key.length} bytes: AES-256 needs exactly ${KEY_BYTES} (openssl rand -base64 32)`,
      )
    }
    const checked = Object.freeze({ id, key })
    byId.set(id, checked)
    primary ??= checked
  }
  if (primary === undefined) return undefined
  return Object.freeze({ primary, byId })
}
