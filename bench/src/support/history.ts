import {
  createSubscription,
  disableSubscription,
  type EnqueueInput,
  enqueueMany,
  Relay,
  silentLogger,
} from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import { sql } from 'kysely'
import { startTrackedSink } from './sink.js'
import { withTimeout } from './timing.js'

/**
 * Gives a template the delivered history a live outbox has (`events` events over 1,000 aggregates, sent through a
 * relay to a subscription that is then disabled, so it holds nothing pending), then analyzes it. Without it, the
 * template's statistics are those of EMPTY tables (analyzed right after the migrations), and the claim's plans,
 * chosen from them, crawl once a stream fills the tables: a relay serving one subscription at 200 events/s
 * delivered about 30 a second until autovacuum analyzed the tables again. No production outbox is that empty.
 */
export async function seedDeliveredHistory(url: string, events = 2000): Promise<void> {
  const db = openKysely(url, { max: 4 })
  const sink = await startTrackedSink({ expected: events })
  try {
    const { id } = await createSubscription(db, { url: sink.url, name: 'history' })
    const batch: EnqueueInput<unknown>[] = Array.from({ length: events }, (_, n) => ({
      aggregateType: 'history',
      aggregateId: String(n % 1000),
      eventType: 'history.entry',
      payload: { n },
    }))
    await db.transaction().execute((trx) => enqueueMany(trx, batch, { notify: false }))
    const relay = new Relay({ db, logger: silentLogger, allowPrivateNetworks: true })
    await relay.start()
    try {
      await withTimeout(sink.tracker.done, 60_000, 'the history to be delivered')
    } finally {
      await relay.stop({ timeoutMs: 1000 })
    }
    await disableSubscription(db, id)
    await sql`VACUUM ANALYZE`.execute(db)
  } finally {
    await sink.close()
    await db.destroy()
  }
}
