import { createHmac, randomBytes } from 'node:crypto'
import { sameSecret } from './auth.js'

/** The query parameter that carries an action's outcome back to the page after its redirect. */
export const FLASH_PARAM = 'flash'

/** An action's outcome, as the page after it shows it. */
export interface Flash {
  readonly kind: 'ok' | 'error'
  readonly text: string
}

/**
 * The outcome banner of an action, written by the server and sealed with a key only this process holds: the page
 * after the redirect shows a banner only when its seal is the console's own. A link with any other text in its
 * query (`?error=Your session expired, call …`) shows nothing, so nobody can put words in the console's mouth.
 * Stateless, so a bearer user, a session and an `authorize` user are served alike; a restart voids the seals,
 * which costs a banner at most.
 */
export class FlashSeal {
  readonly #key = randomBytes(32)

  /** The query value carrying `flash`. */
  seal(flash: Flash): string {
    const body = Buffer.from(JSON.stringify([flash.kind, flash.text])).toString('base64url')
    return `${body}.${this.#mac(body)}`
  }

  /** The flash a query value carries, or undefined when it is absent, malformed or not sealed here. */
  open(value: string | undefined): Flash | undefined {
    if (value === undefined) return undefined
    const at = value.lastIndexOf('.')
    if (at <= 0) return undefined
    const body = value.slice(0, at)
    if (!sameSecret(value.slice(at + 1), this.#mac(body))) return undefined
    try {
      const [kind, text] = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as unknown[]
      if ((kind === 'ok' || kind === 'error') && typeof text === 'string') return { kind, text }
    } catch {
      // A sealed value always parses; this is only reached by a key collision, which is as good as never.
    }
    return undefined
  }

  #mac(body: string): string {
    return createHmac('sha256', this.#key).update(body).digest('base64url')
  }
}
