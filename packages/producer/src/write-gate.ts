/**
 * Runs at most `limit` tasks at once; the others wait their turn. The relay sends the outcome writes of failing
 * subscriptions through one: when many requests to hanging endpoints time out together (they all started when the
 * relay did), their writes would otherwise take every connection of the relay's pool at once, and the marks and
 * claims of the healthy subscriptions would queue behind them.
 */
export class WriteGate {
  readonly #limit: number
  #running = 0
  readonly #waiting: (() => void)[] = []

  constructor(limit: number) {
    this.#limit = Math.max(1, limit)
  }

  /** Tasks running now (for tests). */
  get running(): number {
    return this.#running
  }

  /** Runs `task` once fewer than the limit run, and resolves or rejects as it does. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    while (this.#running >= this.#limit) await new Promise<void>((resolve) => this.#waiting.push(resolve))
    this.#running += 1
    try {
      return await task()
    } finally {
      this.#running -= 1
      this.#waiting.shift()?.()
    }
  }
}
