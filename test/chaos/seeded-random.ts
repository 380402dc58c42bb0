/**
 * A small seeded PRNG (sfc32, seeded through splitmix32), so a chaos run's fault plan, fault choices and workloads
 * all follow from one number and a failure can be replayed with `--seed`.
 *
 * `Math.random` is never used for a choice the run makes; the only randomness outside the seed is the products'
 * own (the relay's retry jitter, UUIDs) and the operating system's scheduling.
 */
export class SeededRandom {
  #a: number
  #b: number
  #c: number
  #d: number

  constructor(seed: number) {
    let state = seed >>> 0
    const next = () => {
      // splitmix32: spreads even small, similar seeds (1, 2, 3) over the whole state.
      state = (state + 0x9e3779b9) >>> 0
      let z = state
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
      return (z ^ (z >>> 16)) >>> 0
    }
    this.#a = next()
    this.#b = next()
    this.#c = next()
    this.#d = next()
    for (let i = 0; i < 12; i++) this.uint32()
  }

  /** The next 32-bit unsigned integer. */
  uint32(): number {
    const t = (((this.#a + this.#b) >>> 0) + this.#d) >>> 0
    this.#d = (this.#d + 1) >>> 0
    this.#a = this.#b ^ (this.#b >>> 9)
    this.#b = (this.#c + (this.#c << 3)) >>> 0
    this.#c = ((this.#c << 21) | (this.#c >>> 11)) >>> 0
    this.#c = (this.#c + t) >>> 0
    return t
  }

  /** A float in [0, 1). */
  next(): number {
    return this.uint32() / 4_294_967_296
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1))
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p
  }

  /** One element of a non-empty list. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)]!
  }

  /** One key of `weights`, chosen in proportion to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K {
    const entries = Object.entries(weights) as [K, number][]
    const total = entries.reduce((sum, [, weight]) => sum + weight, 0)
    let roll = this.next() * total
    for (const [key, weight] of entries) {
      roll -= weight
      if (roll < 0) return key
    }
    return entries[entries.length - 1]![0]
  }

  /**
   * An independent stream for one concern (the fault plan, the proxy, worker 2 …): the plan stays the same
   * however many requests the proxy happened to see, because each concern draws from its own stream.
   */
  fork(label: string): SeededRandom {
    let hash = 0x811c9dc5
    for (const char of label) hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193) >>> 0
    return new SeededRandom((this.#seedBase() ^ hash) >>> 0)
  }

  #seedBase(): number {
    // Derived from the state without advancing it, so forking does not shift the parent's own sequence.
    return (this.#a ^ Math.imul(this.#b, 3) ^ Math.imul(this.#c, 5) ^ Math.imul(this.#d, 7)) >>> 0
  }
}
