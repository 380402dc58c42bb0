import { sql } from 'kysely'

/**
 * A select-list column that makes the statement's own transaction commit without waiting for its WAL flush
 * (`synchronous_commit = off` for that transaction only; PostgreSQL reads the setting when the commit is recorded,
 * before the transaction's local settings end). Add it to the final `SELECT` of a relay statement run on its own.
 *
 * Only for writes whose loss is a state the relay already recovers from: a retry's schedule or a 409 park. If the
 * database crashes within the flush delay (`wal_writer_delay`, 200 ms by default), such a write is lost as if the
 * relay had died before making it — the lane is still leased to the claim that took it, and its lease ends into a
 * takeover — and nothing else is lost: PostgreSQL's log is flushed in order, so any later durable commit (a claim
 * that read the released lane, a mark) flushes this one with it. What it saves is a WAL flush per failed request,
 * paid while the statement's row locks are held: beside many failing endpoints, those flushes were the healthy
 * subscriptions' commits' queue. Marks, enqueues and dead letters stay durable.
 */
export const ASYNC_COMMIT = sql`set_config('synchronous_commit', 'off', true) AS async_commit`
