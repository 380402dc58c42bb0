// Baseline (c): pg-transactional-outbox 0.5.7 in polling mode, segment = aggregate (its per-segment ordering: the
// polling function hands out only the oldest unprocessed message of each segment), the handler POSTing the
// webhook. Settings: batch 128, lock 1 s, poll 50 ms — its best on these machines.

import pg from 'pg'
import {
  DatabaseSetup,
  type GeneralMessageHandler,
  getDisabledLogger,
  initializePollingMessageListener,
  type PollingListenerConfig,
} from 'pg-transactional-outbox'
import type { JsonPoster } from '../src/support/http-client.js'
import type { Backlog } from '../src/support/workload.js'

const SCHEMA = 'pto'
const TABLE = 'outbox'
const NEXT_MESSAGES = 'next_outbox_messages'

/** Creates the library's outbox table, polling function and indexes (its own DDL), then loads a backlog. */
export async function seedTransactionalOutboxBacklog(url: string, backlog: Backlog): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    // Its own DDL generators; `database` and the roles only matter for the GRANT scripts, not used here.
    const setup = {
      outboxOrInbox: 'outbox' as const,
      database: new URL(url).pathname.slice(1),
      schema: SCHEMA,
      table: TABLE,
      listenerRole: 'postgres',
      nextMessagesSchema: SCHEMA,
      nextMessagesName: NEXT_MESSAGES,
    }
    const installed = await client.query(`SELECT to_regclass('${SCHEMA}.${TABLE}') AS t`)
    if (installed.rows[0].t === null) {
      await client.query(DatabaseSetup.dropAndCreateTable(setup))
      await client.query(DatabaseSetup.createPollingFunction(setup))
      await client.query(DatabaseSetup.setupPollingIndexes(setup))
    }
    // Same rows its message storage writes; created_at strictly increasing in sequence order, because that is
    // what orders a segment.
    await client.query(
      `INSERT INTO ${SCHEMA}.${TABLE} (id, aggregate_type, aggregate_id, message_type, segment, payload, created_at)
       SELECT gen_random_uuid(), 'order', (n % $2)::text, 'order.updated', (n % $2)::text,
              jsonb_build_object('order_id', (n % $2)::text, 'n', n, 'seq', n / $2 + 1, 'status', 'paid'),
              now() - interval '1 hour' + n * interval '1 microsecond'
       FROM generate_series(0, $1 - 1) AS n`,
      [backlog.events, backlog.aggregates],
    )
    await client.query(`VACUUM ANALYZE ${SCHEMA}.${TABLE}`)
  } finally {
    await client.end()
  }
}

/** Settings of a pg-transactional-outbox delivery run. */
export interface TransactionalOutboxOptions {
  readonly url: string
  readonly endpoint: string
  readonly poster: JsonPoster
  readonly batchSize?: number
  readonly lockMs?: number
  readonly pollMs?: number
}

/** Starts its polling listener with a handler that POSTs each message; returns its shutdown function. */
export function startTransactionalOutboxDelivery(options: TransactionalOutboxOptions): () => Promise<void> {
  const parsed = new URL(options.url)
  const dbListenerConfig = {
    host: parsed.hostname,
    port: Number(parsed.port),
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
    database: parsed.pathname.slice(1),
  }
  const batchSize = options.batchSize ?? 128
  const config: PollingListenerConfig = {
    outboxOrInbox: 'outbox',
    dbListenerConfig,
    settings: {
      dbSchema: SCHEMA,
      dbTable: TABLE,
      enableMaxAttemptsProtection: false,
      enablePoisonousMessageProtection: false,
      messageCleanupIntervalInMs: 0,
      nextMessagesFunctionSchema: SCHEMA,
      nextMessagesFunctionName: NEXT_MESSAGES,
      nextMessagesBatchSize: batchSize,
      nextMessagesLockInMs: options.lockMs ?? 1000,
      nextMessagesPollingIntervalInMs: options.pollMs ?? 50,
    },
  }
  const handler: GeneralMessageHandler = {
    handle: async (message) => {
      const data = message.payload as { seq: number }
      await options.poster.post(
        options.endpoint,
        JSON.stringify({
          event_id: message.id,
          type: message.messageType,
          aggregate_type: message.aggregateType,
          aggregate_id: message.aggregateId,
          sequence: data.seq,
          occurred_at: message.createdAt,
          data,
        }),
        { 'x-idempotency-key': message.id, 'x-event-sequence': String(data.seq) },
      )
    },
  }
  // Full batches from the first poll: its default ramps up from 1 (poison protection, off here as in its outbox
  // examples), which would only slow the start of a run.
  const [shutdown] = initializePollingMessageListener(config, handler, getDisabledLogger(), {
    batchSizeStrategy: () => Promise.resolve(batchSize),
  })
  return shutdown
}
