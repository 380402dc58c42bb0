import { stats } from '@outbox/producer'
import type { Kysely } from 'kysely'
import { readSnapshot } from './read-snapshot.js'

/** One lag sample: when it was taken (epoch ms) and the outbox's lag then, in seconds. */
export interface LagSample {
  readonly at: number
  readonly lagSeconds: number
}

/** How many samples the ring keeps: an hour at the default 5 s refresh. */
export const LAG_SAMPLES = 720

/**
 * Samples `stats().lagSeconds` every `intervalMs` into a ring buffer, for the lag chart. Kept in this process
 * (the lag has no history in the database); a console replica started a minute ago shows a minute. A failed
 * sample (the database away) is skipped, not thrown: the chart shows the gap.
 */
export class LagSampler {
  readonly #samples: LagSample[] = []
  readonly #timer: NodeJS.Timeout
  #running: Promise<void> | undefined

  constructor(
    private readonly db: Kysely<any>,
    private readonly options: { intervalMs: number; statementTimeoutMs: number; schema: string | undefined },
  ) {
    this.#timer = setInterval(() => void this.sample(), options.intervalMs)
    // An admin app's exit must not wait for the console's chart.
    this.#timer.unref()
    void this.sample()
  }

  /** Takes one sample now (also what the timer calls); a sample already running is awaited, not doubled. */
  sample(): Promise<void> {
    this.#running ??= readSnapshot(this.db, this.options.statementTimeoutMs, (trx) =>
      stats(trx, { schema: this.options.schema }),
    )
      .then(
        (snapshot) => {
          this.#samples.push({ at: Date.now(), lagSeconds: snapshot.lagSeconds })
          if (this.#samples.length > LAG_SAMPLES) this.#samples.splice(0, this.#samples.length - LAG_SAMPLES)
        },
        () => {},
      )
      .finally(() => {
        this.#running = undefined
      })
    return this.#running
  }

  /** The samples kept, oldest first. */
  samples(): readonly LagSample[] {
    return [...this.#samples]
  }

  /** Stops sampling; waits for a sample in progress so the pool can be closed after. */
  async close(): Promise<void> {
    clearInterval(this.#timer)
    await this.#running
  }
}
