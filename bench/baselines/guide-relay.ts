// Baseline (a): the relay of the reference guide ("Implementing the Transactional Outbox Pattern for Webhooks"),
// Step 2, ported faithfully from Python/psycopg to TypeScript/pg: one connection, claim 200 rows with a lease,
// POST each in turn, and mark each row sent in its own transaction right after its 2xx. Only the HTTP client is
// ours (the same undici pool settings the relay uses), so the comparison measures the relay design.
import pg from 'pg'
import type { JsonPoster } from '../src/support/http-client.js'
import type { Backlog } from '../src/support/workload.js'

/** The guide's outbox table and pending index, as written there (in its own schema). */
export const GUIDE_SCHEMA_SQL = `
CREATE SCHEMA IF NOT EXISTS guide;
CREATE TABLE IF NOT EXISTS guide.outbox (
    id             BIGSERIAL PRIMARY KEY,
    event_id       UUID        NOT NULL UNIQUE,
    aggregate_type TEXT        NOT NULL,
    aggregate_id   TEXT        NOT NULL,
    aggregate_seq  BIGINT      NOT NULL,
    event_type     TEXT        NOT NULL,
    payload        JSONB       NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_until  TIMESTAMPTZ,
    attempts       INT         NOT NULL DEFAULT 0,
    sent_at        TIMESTAMPTZ,
    UNIQUE (aggregate_type, aggregate_id, aggregate_seq)
);
CREATE INDEX IF NOT EXISTS outbox_pending_idx
    ON guide.outbox (aggregate_id, aggregate_seq)
    WHERE sent_at IS NULL;
`

const CLAIM_SQL = `
UPDATE guide.outbox
   SET claimed_until = now() + $1::interval,
       attempts = attempts + 1
 WHERE id IN (
       SELECT id FROM guide.outbox
        WHERE sent_at IS NULL
          AND (claimed_until IS NULL OR claimed_until < now())
        ORDER BY aggregate_id, aggregate_seq
        LIMIT $2
          FOR UPDATE SKIP LOCKED
 )
RETURNING id, event_id, aggregate_id, aggregate_seq, event_type, payload, attempts;
`

interface GuideRow {
  id: string
  event_id: string
  aggregate_id: string
  aggregate_seq: string
  event_type: string
  payload: unknown
  attempts: number
}

/** Creates the guide's table and loads a backlog with one INSERT … SELECT generate_series. */
export async function seedGuideBacklog(url: string, backlog: Backlog): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(GUIDE_SCHEMA_SQL)
    // Same aggregates, sequences and payloads as backlogEvent() gives the other systems.
    await client.query(
      `INSERT INTO guide.outbox (event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload)
       SELECT gen_random_uuid(), 'order', (n % $2)::text, n / $2 + 1, 'order.updated',
              jsonb_build_object('order_id', (n % $2)::text, 'n', n, 'seq', n / $2 + 1, 'status', 'paid')
       FROM generate_series(0, $1 - 1) AS n ORDER BY n`,
      [backlog.events, backlog.aggregates],
    )
    await client.query('VACUUM ANALYZE guide.outbox')
  } finally {
    await client.end()
  }
}

/** The guide's `Relay` class: `claim`, `mark_sent`, `release`, `publish`, `run_once`. */
export class GuideRelay {
  constructor(
    private readonly conn: pg.Client,
    private readonly client: JsonPoster,
    private readonly endpoint: string,
    private readonly lease = '60 seconds',
    private readonly batch = 200,
    private readonly maxAttempts = 8,
  ) {}

  /** `with self.conn.transaction()` on a non-autocommit psycopg connection: BEGIN … COMMIT around the claim. */
  async claim(): Promise<GuideRow[]> {
    await this.conn.query('BEGIN')
    try {
      const { rows } = await this.conn.query<GuideRow>(CLAIM_SQL, [this.lease, this.batch])
      await this.conn.query('COMMIT')
      return rows
    } catch (error) {
      await this.conn.query('ROLLBACK')
      throw error
    }
  }

  async markSent(rowId: string): Promise<void> {
    await this.conn.query('BEGIN')
    await this.conn.query(
      'UPDATE guide.outbox SET sent_at = now(), claimed_until = NULL WHERE id = $1 AND sent_at IS NULL',
      [rowId],
    )
    await this.conn.query('COMMIT')
  }

  /** Gives the row back immediately so the next poll retries it. */
  async release(rowId: string): Promise<void> {
    await this.conn.query('BEGIN')
    await this.conn.query('UPDATE guide.outbox SET claimed_until = NULL WHERE id = $1', [rowId])
    await this.conn.query('COMMIT')
  }

  async publish(row: GuideRow): Promise<void> {
    // httpx's json= serialises the dict; raise_for_status() throws on a non-2xx answer.
    await this.client.post(
      this.endpoint,
      JSON.stringify({
        event_id: row.event_id,
        type: row.event_type,
        aggregate_id: row.aggregate_id,
        sequence: Number(row.aggregate_seq),
        data: row.payload,
      }),
      { 'x-idempotency-key': row.event_id, 'x-event-sequence': String(row.aggregate_seq) },
    )
  }

  /** The guide calls a dead-letter hook it does not define; here it is a no-op (no event fails in the runs). */
  async deadLetter(_row: GuideRow): Promise<void> {}

  async runOnce(): Promise<{ sent: number; failed: number; dead: number }> {
    let sent = 0
    let failed = 0
    let dead = 0
    for (const row of await this.claim()) {
      try {
        await this.publish(row)
        await this.markSent(row.id)
        sent += 1
      } catch {
        if (row.attempts >= this.maxAttempts) {
          await this.deadLetter(row)
          await this.markSent(row.id)
          dead += 1
        } else {
          await this.release(row.id)
          failed += 1
        }
      }
    }
    return { sent, failed, dead }
  }
}

/**
 * Triggers `run_once` the way the guide recommends ("Start with the 200 ms poll"): again at once while it finds
 * work, after 200 ms when it found none. Runs until `stopped()`.
 */
export async function runGuideRelay(relay: GuideRelay, stopped: () => boolean, pollMs = 200): Promise<void> {
  while (!stopped()) {
    const { sent, failed, dead } = await relay.runOnce()
    if (sent + failed + dead === 0) await new Promise((resolve) => setTimeout(resolve, pollMs))
  }
}
