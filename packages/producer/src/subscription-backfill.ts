import type { RelayEventMap, RelayEvents } from './events.js'
import type { ResolvedRelayOptions } from './options.js'
import { type Clock, interruptibleSleep } from './runtime.js'
import { type BackfillBatchRow, runBackfillBatch } from './sql/backfill-batch.js'
import type { SubscriptionTargets } from './subscription-targets.js'

/** Aggregates one backfill batch copies at most. */
export const BACKFILL_AGGREGATES_PER_BATCH = 500
/**
 * Retained rows one backfill batch reads at most, across its aggregates: an aggregate with a long history is copied
 * over several batches, so no batch's transaction grows with one aggregate's size.
 */
export const BACKFILL_ROWS_PER_BATCH = 5000
/**
 * How long a batch waits for a transaction holding one of its aggregates before it gives up (and tries again
 * later). Below PostgreSQL's default `deadlock_timeout` (1 s): in a lock cycle with an application's transaction,
 * the batch gives up first, so the application's transaction is never the one chosen to fail.
 */
export const BACKFILL_LOCK_TIMEOUT_MS = 500
/** How long a relay waits before trying again a backfill that waited on a lock, was busy elsewhere, or failed. */
export const BACKFILL_RETRY_MS = 1000

/** What the relay lends the backfill. */
export interface BackfillContext {
  readonly options: ResolvedRelayOptions
  readonly events: RelayEvents
  readonly targets: SubscriptionTargets
  readonly clock: Clock
  /** False once the relay stops: no new batch starts. */
  readonly running: () => boolean
  /** A backfill is done: serve the subscription now rather than at the next refresh. */
  readonly onDone: () => void
  readonly reportError: (error: unknown, during: RelayEventMap['relay:error']['during']) => void
}

/**
 * The backfill of subscriptions created with `startAt: 'earliest'`, as one relay runs it: in the background of its
 * claim loop, never inside a claim, one batch at a time, taking turns between the subscriptions whose backfill runs.
 * Relays coordinate through the subscription's row (each batch locks it with SKIP LOCKED and advances the cursor
 * under that lock), so two relays never copy the same batch and neither waits for the other: the busy one tries
 * again a little later. A stopped relay starts no batch, and the batch in flight is one statement: it commits or
 * rolls back whole, and the next batch, on any relay, resumes from the cursor.
 */
export class SubscriptionBackfill {
  readonly #ctx: BackfillContext
  #work: Promise<void> | undefined
  /** Subscriptions whose stall was reported and has not ended: one report per stall. */
  readonly #waiting = new Set<string>()
  #wake: (() => void) | undefined

  constructor(ctx: BackfillContext) {
    this.#ctx = ctx
  }

  /** True while a batch runs or the loop waits to try again. */
  get busy(): boolean {
    return this.#work !== undefined
  }

  /** Starts the background copy when a subscription needs one and it is not running already. */
  poke(): void {
    if (this.#work || this.#ctx.targets.backfilling().size === 0 || !this.#ctx.running()) return
    this.#work = this.#loop().finally(() => {
      this.#work = undefined
    })
  }

  /** Resolves when the background copy has ended (after a stop: once its batch in flight committed or rolled back). */
  async settled(): Promise<void> {
    this.#wake?.()
    await this.#work
  }

  /** One batch for each subscription whose backfill runs, awaited (a cycle run by hand, or a test's step). */
  async step(): Promise<BackfillBatchRow[]> {
    const results: BackfillBatchRow[] = []
    for (const [id, name] of this.#ctx.targets.backfilling()) results.push(await this.#batch(id, name))
    return results
  }

  async #loop(): Promise<void> {
    while (this.#ctx.running()) {
      const backfilling = [...this.#ctx.targets.backfilling()]
      if (backfilling.length === 0) return
      let progressed = false
      for (const [id, name] of backfilling) {
        if (!this.#ctx.running()) return
        try {
          const result = await this.#batch(id, name)
          if (result.outcome === 'copied' || result.outcome === 'done') progressed = true
        } catch (error) {
          this.#ctx.reportError(error, 'backfill')
        }
      }
      if (!progressed) await this.#pause(BACKFILL_RETRY_MS)
    }
  }

  #pause(ms: number): Promise<void> {
    return interruptibleSleep(this.#ctx.clock, ms, (wake) => {
      this.#wake = wake
    })
  }

  async #batch(subscriptionId: string, name: string): Promise<BackfillBatchRow> {
    const { options, events, targets } = this.#ctx
    const result = await runBackfillBatch(options, {
      subscriptionId,
      aggregates: BACKFILL_AGGREGATES_PER_BATCH,
      rows: BACKFILL_ROWS_PER_BATCH,
      lockTimeoutMs: BACKFILL_LOCK_TIMEOUT_MS,
    })
    const fields = {
      subscriptionId,
      subscription: name,
      aggregatesDone: result.aggregatesDone,
      aggregatesTotal: result.aggregatesTotal,
      events: result.events,
    }
    switch (result.outcome) {
      case 'copied':
      case 'done': {
        this.#waiting.delete(subscriptionId)
        const state = result.outcome === 'done' ? 'done' : 'running'
        events.emit('subscription:backfill', {
          subscriptionId,
          name,
          state,
          copied: result.copied,
          aggregatesDone: result.aggregatesDone,
          aggregatesTotal: result.aggregatesTotal,
          events: result.events,
        })
        if (state === 'done') {
          options.logger.info(fields, 'subscription backfill done: delivering')
          targets.backfillDone(subscriptionId)
          this.#ctx.onDone()
        } else {
          options.logger.debug({ ...fields, copied: result.copied }, 'subscription backfill batch copied')
        }
        break
      }
      case 'waiting':
        if (!this.#waiting.has(subscriptionId)) {
          this.#waiting.add(subscriptionId)
          const waitingSince = result.waitingSince ?? new Date()
          options.logger.warn(
            { ...fields, waitingSince },
            'subscription backfill waits for a transaction holding one of its aggregates (an enqueue left open?); retrying',
          )
          events.emit('subscription:backfill:waiting', { subscriptionId, name, waitingSince })
        }
        break
      case 'none':
        // Done by another relay, or the subscription was deleted: stop copying for it; the next refresh says which.
        this.#waiting.delete(subscriptionId)
        targets.backfillDone(subscriptionId)
        this.#ctx.onDone()
        break
      case 'busy':
        break
    }
    return result
  }
}
