/** The shortest console token accepted: 22 characters of base64 carry about 128 bits. */
export const MIN_TOKEN_LENGTH = 22

/**
 * The fewest distinct characters a console token must have: a long run of few characters (`passwordpassword…`,
 * `aaaa…`) is long but guessable.
 */
export const MIN_TOKEN_DISTINCT = 16

/**
 * Why `token` is too weak to guard the console, or undefined when it is strong enough: at least
 * {@link MIN_TOKEN_LENGTH} characters, {@link MIN_TOKEN_DISTINCT} of them distinct. The reason never quotes the
 * token.
 *
 * @example
 * ```ts
 * import { tokenWeakness } from '@outbox/console'
 * tokenWeakness('passwordpassword') // 'it has 16 characters; at least 22 are needed …'
 * ```
 */
export function tokenWeakness(token: string): string | undefined {
  const length = [...token].length
  if (length < MIN_TOKEN_LENGTH) {
    return `it has ${length} characters; at least ${MIN_TOKEN_LENGTH} are needed (e.g. openssl rand -base64 32)`
  }
  const distinct = new Set(token).size
  if (distinct < MIN_TOKEN_DISTINCT) {
    return `it has only ${distinct} distinct characters; at least ${MIN_TOKEN_DISTINCT} are needed (e.g. openssl rand -base64 32)`
  }
  return undefined
}
