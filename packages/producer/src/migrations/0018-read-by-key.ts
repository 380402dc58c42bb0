/**
 * Migration 0018: both claim functions, and enqueue's recording of a trace context, plan without sequential scans,
 * whatever the statistics say. Self-contained and frozen once merged: a later change is a new migration with its own
 * full text.
 *
 * Why: a claim's statements keep one generic plan per connection (0004), made on their first call. On an outbox
 * that looked empty then — a fresh install, its statistics from an ANALYZE of empty tables or from none — PostgreSQL
 * planned the final read of the claimed rows (`LEFT JOIN outbox o ON o.id = k.id`, in both functions) as a
 * sequential scan, and the cached plan went on scanning the whole outbox on every claim as the table grew, until
 * autovacuum's next ANALYZE replanned it. At a steady 200 events/s from an empty outbox that read took 0.8 ms of the
 * one-subscription claim at the median (1.6 ms at 2,000 rows) against 0.04 ms by key; over 5,000 delivered rows the
 * general claim read 40,016 rows to return two lanes (`claim.single-subscription.test.ts`).
 *
 * Every table both functions read has an index for what they read it by (the due index, the pending-lane index, the
 * outbox and lane primary keys, the leased and blocked lane indexes, the subscription's primary key), so without
 * sequential scans each statement is planned by key, as on an analysed outbox. The general claim also loses hash and
 * merge joins, as 0017's claim has since its first version: with sequential scans off, its planner fed them a full
 * scan of the outbox's primary key instead (10,020 rows read for the same two lanes). Its joins all look rows
 * up by key from a small set (the due lanes, the picked ones, the claimed ones), so nested loops are the plans an
 * analysed outbox gets anyway.
 *
 * Enqueue inside an active trace (0015's nine-argument `outbox_enqueue`) records the context with `UPDATE outbox …
 * WHERE event_id = p_event_id`, and its plan, kept per connection the same way, scanned the outbox too: each traced
 * enqueue read every row of it (20,017 rows per call over 10,000 rows), in the producer's own transaction. The
 * `(event_id, subscription_id)` unique index finds them by key; the function it calls first (the untraced
 * `outbox_enqueue`, and `outbox_insert_deliveries` inside) reads only by key and a handful of subscription rows, so
 * planning those without sequential scans too, when called from here, changes nothing.
 *
 * `SET` clauses, not `set_config` in the body: they hold for the call and are restored when the function returns, so
 * the caller's own settings are untouched and a claim planned through 0017's hand-over to 0012's function plans
 * exactly as one called directly; the functions' `set_config(..., true)` of `synchronous_commit` still lasts until
 * the claim's commit (PostgreSQL restores only the settings a clause names).
 */
export function migration0018(schema: string): string {
  const s = `"${schema}"`
  return `
ALTER FUNCTION ${s}.outbox_claim_single_subscription_lanes(uuid, integer, integer, bigint, integer, integer, bigint)
  SET enable_seqscan = off;
ALTER FUNCTION ${s}.outbox_claim_subscription_lanes(uuid[], integer[], integer, bigint, integer, integer, bigint)
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION ${s}.outbox_enqueue(uuid, text, text, text, jsonb, integer, text, text, text)
  SET enable_seqscan = off;
`
}
