/**
 * Migration 0001: `processed_events` (one row per event id recorded; its primary key makes a duplicate a no-op)
 * with the `received_at` index that makes each of pruneProcessed's oldest-first batches a range scan, and
 * `consumer_cursors` (the highest sequence applied per aggregate, never pruned). `IF NOT EXISTS` lets a team
 * paste the script into its own tool and run it again safely.
 *
 * `schema` is the schema's name as given (quoted here as an identifier), or `undefined` for the search_path. Each
 * statement is one line, as Kysely's builders compiled it when this migration was written: a `\` at a line's end
 * joins the next line to it.
 *
 * Self-contained and frozen once merged: a later change is a new migration with its own full text.
 */
export function migration0001(schema: string | undefined): string {
  const s = schema === undefined ? '' : `"${schema.replaceAll('"', '""')}".`
  return `create table if not exists ${s}"processed_events" (\
"event_id" uuid primary key, \
"aggregate_type" text not null, \
"aggregate_id" text not null, \
"sequence" bigint not null check (sequence >= 1), \
"type" text not null, \
"received_at" timestamptz default now() not null);
create index if not exists "processed_events_received_at_idx" on ${s}"processed_events" ("received_at");
create table if not exists ${s}"consumer_cursors" (\
"aggregate_type" text not null, \
"aggregate_id" text not null, \
"last_sequence" bigint default 0 not null check (last_sequence >= 0), \
"updated_at" timestamptz default now() not null, \
constraint "consumer_cursors_pkey" primary key ("aggregate_type", "aggregate_id"));
`
}
