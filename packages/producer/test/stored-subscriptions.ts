import { type Sink, type SinkAnswer, startSink, type TestDatabase } from '@outbox/test-harness'
import { afterEach, beforeAll } from 'vitest'
import {
  deleteSubscription,
  disableSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  listSubscriptions,
  Relay,
  type RelayOptions,
  silentLogger,
} from '../src/index.js'
import { expectLanesLive } from './support.js'

/** What a test of stored subscriptions starts: sinks and relays, all ended after each test. */
export interface StoredSubscriptions {
  /** A loopback webhook sink, closed after the test. */
  sink(respond?: (request: Sink['requests'][number]) => SinkAnswer | Promise<SinkAnswer>): Promise<Sink>
  /** A relay serving the stored subscriptions (loopback allowed: the sinks are there), stopped after the test. */
  relay(options?: Partial<RelayOptions>): Relay
}

/**
 * Set-up for a file of stored-subscription tests: the implicit subscription disabled (only each test's own
 * subscriptions receive events), and after each test its relays stopped, its sinks closed, every lane checked live
 * and every stored subscription deleted, then `cleanup` (e.g. a TRUNCATE).
 */
export function useStoredSubscriptions(
  t: TestDatabase,
  defaults: Partial<RelayOptions> = {},
  cleanup?: () => Promise<unknown>,
): StoredSubscriptions {
  const sinks: Sink[] = []
  const relays: Relay[] = []
  beforeAll(async () => {
    await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
  })
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop({ timeoutMs: 0 })))
    await Promise.all(sinks.splice(0).map((started) => started.close()))
    await expectLanesLive(t.db)
    for (const subscription of await listSubscriptions(t.db)) {
      if (!subscription.implicit) await deleteSubscription(t.db, subscription.id)
    }
    await cleanup?.()
  })
  return {
    async sink(respond) {
      const started = await startSink(respond)
      sinks.push(started)
      return started
    },
    relay(options = {}) {
      const relay = new Relay({
        db: t.db,
        allowPrivateNetworks: true,
        logger: silentLogger,
        ...defaults,
        ...options,
      })
      relays.push(relay)
      return relay
    },
  }
}

/** Each aggregate's sequences as one sink received them, in arrival order. */
export function sequencesByAggregate(target: Sink): Map<string, number[]> {
  const lanes = new Map<string, number[]>()
  for (const request of target.requests) {
    const key = request.json.aggregate_id as string
    lanes.set(key, [...(lanes.get(key) ?? []), request.json.sequence as number])
  }
  return lanes
}
