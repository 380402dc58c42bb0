import { createHmac, createSecretKey, type KeyObject, timingSafeEqual } from 'node:crypto'
import { OutboxError } from '../errors.js'

/**
 * The HMAC-SHA256 keys of a sender that signs with a shared secret used as it is (its UTF-8 bytes are the key):
 * Stripe's `whsec_…` and GitHub's webhook secret. Several secrets are accepted so a secret can be rolled without
 * refusing the deliveries signed with the old one.
 *
 * Checked once, when the verifier is made, so a wrong secret fails the start and not every request with 401:
 * each must be a non-empty string without leading or trailing whitespace (a newline read from a file or an
 * environment file is the usual cause of "every signature is invalid").
 *
 * @param where the factory's name, for the message.
 * @param check a sender-specific rule (e.g. Stripe's `whsec_` prefix): a message, or undefined when it holds.
 */
export function hmacKeys(
  secret: unknown,
  where: string,
  check: (secret: string) => string | undefined = () => undefined,
): readonly KeyObject[] {
  const secrets = typeof secret === 'string' ? [secret] : secret
  if (!Array.isArray(secrets) || secrets.length === 0) {
    throw new OutboxError(
      'ERR_OUTBOX_INVALID_SECRET',
      `${where}: pass the webhook signing secret as a string, or several as an array while rolling it`,
    )
  }
  return Object.freeze(
    secrets.map((one: unknown, index) => {
      const which = secrets.length === 1 ? 'the secret' : `secret ${index + 1}`
      // The secret itself is never shown: messages end up in logs.
      if (typeof one !== 'string' || one.length === 0) {
        throw new OutboxError('ERR_OUTBOX_INVALID_SECRET', `${where}: ${which} must be a non-empty string`)
      }
      if (one.trim() !== one) {
        throw new OutboxError(
          'ERR_OUTBOX_INVALID_SECRET',
          `${where}: ${which} has leading or trailing whitespace (a newline from a file?); trim it`,
        )
      }
      const problem = check(one)
      if (problem !== undefined) {
        throw new OutboxError('ERR_OUTBOX_INVALID_SECRET', `${where}: ${which} ${problem}`)
      }
      return createSecretKey(Buffer.from(one, 'utf8'))
    }),
  )
}

/**
 * Whether any of `presented` (raw signature bytes) is the HMAC-SHA256 of `parts` under any of `keys`. Every
 * comparison is constant-time; a candidate of the wrong length is skipped without comparing.
 */
export function hmacMatches(
  keys: readonly KeyObject[],
  parts: readonly (string | Uint8Array)[],
  presented: readonly Buffer[],
): boolean {
  for (const key of keys) {
    const hmac = createHmac('sha256', key)
    for (const part of parts) hmac.update(part)
    const expected = hmac.digest()
    for (const candidate of presented) {
      if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) return true
    }
  }
  return false
}
