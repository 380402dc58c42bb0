import {
  DEFAULT_DOCTOR_LIMIT,
  DEFAULT_LIST_LIMIT,
  DEFAULT_STOP_TIMEOUT_MS,
  DEFAULT_WATCH_INTERVAL_MS,
  EXIT_PRUNE_NOT_CAUGHT_UP,
  EXIT_VIOLATIONS,
} from './cli-defaults.js'

// The help texts live apart from the commands, and load nothing but strings: `outbox --help` and
// `outbox <command> --help` answer without loading Kysely, pg and the HTTP client. The library defaults quoted
// below are checked against the library's DEFAULT_* exports by the CLI tests.

/** The options every database command takes, with the name column as wide as the page's other options. */
function databaseOptions(width = 21): string {
  return [
    ['--database-url <url>', 'PostgreSQL connection string                     [env: DATABASE_URL]'],
    ['', 'one holding a password is refused (ps shows it): use DATABASE_URL'],
    ['--schema <name>', 'schema of the producer tables (default public)   [env: OUTBOX_SCHEMA]'],
    ['-h, --help', 'show this help'],
  ]
    .map(([name, text]) => `  ${name!.padEnd(width)}  ${text}`)
    .join('\n')
}

/** Every help page, by the words after `outbox`. */
export const HELP = {
  migrate: `Usage: outbox migrate [options]

Creates the schema if needed and the producer tables (outbox, outbox_counter, outbox_lane), or brings them up to
date. Idempotent, and safe to run from several processes at once (a migration lock serialises them). Progress is
kept in its own table, outbox_producer_migration, in the same schema.

Options:
${databaseOptions()}

Example:
  DATABASE_URL=postgres://app@db:5432/app outbox migrate --schema outbox
`,

  relay: `Usage: outbox relay [--endpoint <url> | --subscription <id|name>…] [options]

With --endpoint it delivers every event to that one URL (the implicit subscription, "default"). Without it, it
serves the stored subscriptions (outbox subscriptions create): every enabled one, or those given by --subscription,
each with its own URL, secrets, filters and limits.

Claims lanes (one per subscription and aggregate), POSTs their events in sequence order as signed webhooks, marks them sent after
a 2xx, retries failures and dead-letters what never succeeds. Run as many relays as you like. Logs one line per
delivery event to stdout. On SIGINT/SIGTERM it stops claiming, lets in-flight requests finish (aborting them
after --stop-timeout), writes its marks, releases its claims so another relay takes over at once, and exits 0.
A second signal (a second Ctrl-C a second or more after the first) exits at once (its claims then expire after
--lease); the same signal again within a second is one keypress delivered twice (by the terminal and npx), ignored.
Started before its database (compose, a rollout, a reboot), it waits for it: tries again with backoff, logs the
wait every 30 s, answers /healthz 200 and /readyz 503 with the reason, and starts as soon as the database answers.
A wrong password, a missing database or missing tables (when the database answered at once) exit 1.

Options:
  --endpoint <url>              the subscriber's webhook URL                     [env: OUTBOX_ENDPOINT]
  --subscription <id|name>      without --endpoint: serve only this stored subscription; repeat it (or
                                comma-separate) for several (default: every enabled one)
  --allow-private-networks      let stored subscriptions reach loopback, private and link-local addresses
                                (refused by default: their URLs are customer input). Never needed for
                                --endpoint, which is yours
  --secret <whsec_…>            --endpoint's Standard Webhooks signing secret of at least 24 bytes; repeat it (or
                                comma-separate) to sign with several during a rotation. Prefer the
                                environment: flags show in ps. Without one, requests go out unsigned (warned).
                                Make one: echo "whsec_$(openssl rand -base64 32)"
                                                                                 [env: OUTBOX_SECRET]
  --secret-file <path>          read the signing secrets from a file, one per line (a mounted Secret)
                                                                            [env: OUTBOX_SECRET_FILE]
  --database-url-file <path>    read the database URL from a file; a --database-url holding a password is
                                refused (ps shows it): use this or DATABASE_URL   [env: DATABASE_URL_FILE]
  --config <file>               a JSON object of these options in camel case, e.g. {"lease": "30s"};
                                unknown keys are refused                             [env: OUTBOX_CONFIG]
  --concurrency <n>             lanes delivered in parallel (default 16)
  --batch-size <n>              most events taken from one lane per claim (default 200)
  --lease <duration>            how long a claim owns its lane (default 60s)
  --request-timeout <duration>  timeout of one webhook request; must fit inside the lease (default 10s)
  --poll-interval <duration>    how often an idle relay looks for work (default 200ms)
  --retry-schedule <durations>  delays after the 1st, 2nd, … failed attempt, e.g. 5s,5m,30m,2h
                                (default 5s,5m,30m,2h,5h,10h,10h; attempts = delays + 1)
  --on-exhausted <skip|block>   when attempts run out: skip dead-letters the event and moves the lane on;
                                block parks the lane until the dead letter is redriven (default skip)
  --listen                      wake up on NOTIFY (one dedicated connection; not through PgBouncer in
                                transaction mode); polling stays the safety net
  --stop-timeout <duration>     how long shutdown waits for in-flight requests (default ${DEFAULT_STOP_TIMEOUT_MS / 1000}s)
  --log-format <text|json>      key=value lines, or one JSON object per line (default: text on a
                                terminal, json otherwise)
  --log-level <level>           debug, info, warn or error; warn hides the line per successful delivery
                                (default info)
  --verbose                     also log the relay's own diagnostics (at the chosen --log-level)
  --metrics-port <port>         serve /metrics (Prometheus), /healthz (liveness: the process answers; never
                                the database) and /readyz (the database answers and the claim loop moves)
                                on this port; 0 picks a free one (default: off)   [env: OUTBOX_METRICS_PORT]
  --metrics-host <address>      interface of the metrics port (default 0.0.0.0, where a pod's probes and
                                scrapes arrive; 127.0.0.1 keeps it local)         [env: OUTBOX_METRICS_HOST]
${databaseOptions(28)}

Every option is also read from the environment as OUTBOX_<OPTION> (--poll-interval: OUTBOX_POLL_INTERVAL; true/false
for switches) and from --config; the command line wins over the environment, which wins over the file.
Stored subscriptions' secrets encrypted at rest are decrypted with OUTBOX_SECRET_KEYS (or OUTBOX_SECRET_KEYS_FILE):
id:base64 keys, comma-separated (see outbox secrets --help); a subscription whose key is missing is skipped, and
the log names the key id. Environment only: a flag would show in ps.
Database deadlines (environment, whole milliseconds, 0 turns one off), so a silent network cannot hang the relay:
  OUTBOX_DB_CONNECT_TIMEOUT_MS (10000), OUTBOX_DB_STATEMENT_TIMEOUT_MS (30000, server side),
  OUTBOX_DB_QUERY_TIMEOUT_MS (statement + 5000, client side; the connection is dropped),
  OUTBOX_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS (10000), OUTBOX_DB_KEEPALIVE_DELAY_MS (10000),
  OUTBOX_LISTEN_HEARTBEAT_MS (15000) and OUTBOX_LISTEN_HEARTBEAT_TIMEOUT_MS (5000) for --listen.
  Keep them below --lease; a longer one is safe (writes are fenced), only slower to notice.

Examples:
  OUTBOX_SECRET=whsec_… outbox relay --endpoint https://billing.internal/hooks --listen --log-format json
  outbox relay --listen                      # every enabled stored subscription
`,

  subscriptions: `Usage: outbox subscriptions create|list|show|update|disable|enable|delete|rotate-secret|replay [options]

Stored subscriptions: each a webhook destination with its own URL, secret, tenant, event-type filter, retries
and limits, served by every relay started without --endpoint. Each (subscription, aggregate) is its own lane: a
subscription that is down or slow never delays another. <subscription> is an id or a name.

  create --url <url> [settings] [--start-at now|earliest]
                                      create one; prints its id and its secret (shown this once only).
                                      earliest: first every retained event it wants (copied by the relays in
                                      batches; nothing is delivered until the copy is done), then what follows
  list [--tenant <t>] [--json] [--show-urls]
                                      every subscription, never their secrets (and backfill progress); URLs
                                      with their user-info and query values masked unless --show-urls
  show <subscription> [--json] [--show-urls]
                                      one subscription, with its backfill's progress
  update <subscription> [settings]    change its URL, filters or limits (--clear <setting> to unset one)
  disable <subscription> [--reason r] pause it: relays stop delivering; its events are kept (and pin pruning)
                                      until it is enabled or deleted, or outbox prune --disabled-retention
                                      drops those held past it
  enable <subscription>               resume it, oldest events first
  delete <subscription> [--yes]       delete it with every event recorded for it
  rotate-secret <subscription> [--overlap 24h] [--secret whsec_…]
                                      a new secret (printed once); the old ones are signed with as well until
                                      the overlap ends (0 ends them now)
  replay <subscription> --since <when> [--until <when>] [--batch-size n] [--lease-wait 2m] [--json]
                                      send its events created since <when> (2h ago, or an ISO time) again, in
                                      order, with their ids and sequences; not dead letters (dead-letters
                                      redrive) nor pruned ones. Progress on stderr; exits ${EXIT_PRUNE_NOT_CAUGHT_UP} when lanes
                                      a relay held past --lease-wait were left out (run it again)

Settings (create, update):
  --url <url>                   the subscriber's http(s) URL
  --name <name>                 a unique name, usable in place of the id
  --tenant <tenant>             receive only this tenant's events (enqueue's tenant)
  --all-tenants                 receive every tenant's events (tenant '*'); once any subscription has a tenant,
                                create without --tenant or --all-tenants is refused, so none gets them by omission
  --event-type <type>           receive only this type, exact or a prefix ending in * (order.*); repeatable
  --secret <whsec_…>            (create, rotate-secret) the signing secret; default: a new random one
                                on the command line ps shows it (warned): prefer OUTBOX_SECRET
                                                                                 [env: OUTBOX_SECRET]
  --actor <name>                who makes the change, in the audit log (every subcommand that changes
                                something; default: the OS user)
  --max-in-flight <n>           most of its lanes in flight at once, across every relay
  --rate <n>                    most requests per second to it, across every relay (0.5 = one every 2 s)
  --retry-schedule <durations>  its own retry delays, e.g. 5s,5m,30m (default: the relay's)
  --request-timeout <duration>  its own request timeout; must fit the relays' lease (default: the relay's)
  --on-exhausted <skip|block>   its own rule when attempts run out (default: the relay's)
  --json                        print the result as JSON
${databaseOptions(28)}

Examples:
  outbox subscriptions create --url https://acme.example/hooks --name acme --tenant acme --event-type 'order.*'
  outbox subscriptions create --url https://audit.internal/hooks --name audit --all-tenants --start-at earliest
  outbox subscriptions disable acme --reason "customer asked"
  outbox subscriptions rotate-secret acme --overlap 24h
  outbox subscriptions replay acme --since 2h

With OUTBOX_SECRET_KEYS (or OUTBOX_SECRET_KEYS_FILE) set, create and rotate-secret store the new secret encrypted
under its first key (see outbox secrets --help); the relays then need the same keys. Without, it is stored as is.
`,

  stats: `Usage: outbox stats [--json] [--watch [--interval 2s]] [options]

Prints the outbox's health from one consistent snapshot:
  lag         age of the oldest undelivered event (alert on this)
  pending     events not delivered yet (including lanes waiting in backoff)
  in flight   lanes a relay holds under a live lease
  struggling  lane heads that failed 3 or more times and are still retried
  suspect     lane heads whose relays died sending them as often as their attempts allow: each is sent alone
  dead        dead-lettered events (outbox dead-letters list)
  blocked     lanes parked by a 409 from the consumer or by --on-exhausted block
With stored subscriptions, the same figures follow per subscription (and DROPPED, once outbox prune has dropped
deliveries a disabled subscription held past the disabled retention); a disabled subscription holding pending
events is warned about on stderr, with when prune starts to drop them.

Options:
  --json                 print JSON: {"lagSeconds", "pending", "inFlight", "struggling", "suspect", "dead", "blocked",
                         "subscriptions": [{"id", "name", "state", "tenant", …the same figures}], "warnings"}
  --watch                refresh until Ctrl-C: redraws in place on a terminal, one line per refresh otherwise
                         (one JSON object per line with --json, with a "time" field)
  --interval <duration>  time between refreshes with --watch, e.g. 500ms, 2s, 1m (default ${DEFAULT_WATCH_INTERVAL_MS / 1000}s)
  --disabled-retention <duration|off>
                         the one outbox prune runs with, if any, for the warning's date (default off)
${databaseOptions()}

Examples:
  outbox stats
  outbox stats --json | jq .lagSeconds
  outbox stats --watch --interval 1s
`,

  prune: `Usage: outbox prune --retention <duration> [options]

Deletes sent events older than the retention in batches, oldest first, and dead letters past their own retention
if --dead-letter-retention is given (otherwise dead letters are kept), and delivery log rows (outbox deliveries)
past theirs if --delivery-log-retention is given (otherwise the log is kept, and grows). Sequence counters and
lane rows are never deleted. Pending events are kept — a disabled subscription's too, unless you opt in with
--disabled-retention: then prune drops what a DISABLED subscription has held longer than that, the oldest of each
of its lanes, so the lane keeps a contiguous tail, delivered in order once the subscription is enabled; it counts
them on the subscription (outbox subscriptions show, outbox stats), records each drop in the audit log (outbox
audit, under --actor) and warns on stderr. A lane an enqueue, a relay or a redrive holds at
that moment is left for the next run. Progress goes to stderr while it runs, the summary to stdout.

Exits 0 when everything past retention is gone, and ${EXIT_PRUNE_NOT_CAUGHT_UP} when --max-batches stopped it first, or a
disabled subscription's lane was busy (run it again, more often, or with a larger budget) — so cron can alert on
a backlog.

Options:
  --retention <duration>               keep sent events at least this long, e.g. 30d, 12h (required)
  --dead-letter-retention <duration>   also delete dead letters older than this (default: keep them)
  --delivery-log-retention <duration>  also delete delivery log rows older than this (default: keep them)
  --disabled-retention <duration|off>  opt in: drop what a disabled subscription held longer than this
                                       (default off: keep it until the subscription is enabled or deleted)
  --actor <name>                       who drops, as the audit log records it (default: the OS user)
  --batch-size <n>                     rows per delete statement (default 5000)
  --max-batches <n>                    batch budget per status for this run (default 200)
  --pause <duration>                   pause between batches, to leave room for live traffic (default 0)
  --json                               print the result as JSON: {"removed", "dropped", "caughtUp", "sent",
                                       "dead"}
                                       (and "deliveryLog" with --delivery-log-retention)
${databaseOptions(35)}

Exit codes: 0 caught up · 1 database failure · 2 usage error · ${EXIT_PRUNE_NOT_CAUGHT_UP} not caught up · 130/143 interrupted

Example (crontab):
  15 * * * *  outbox prune --retention 30d --dead-letter-retention 90d --delivery-log-retention 7d --pause 50ms
`,

  'dead-letters': `Usage: outbox dead-letters <list|show|redrive|discard> [options]

Inspect, repair or delete events whose delivery gave up.

Commands:
  list      list dead letters, oldest first        (outbox dead-letters list --help)
  show      one dead letter with its payload       (outbox dead-letters show --help)
  redrive   send dead letters again                (outbox dead-letters redrive --help)
  discard   delete dead letters for good           (outbox dead-letters discard --help)

Examples:
  outbox dead-letters list
  outbox dead-letters list --event-type 'order.*' --status 410 --since 24h
  outbox dead-letters list --json | jq -r '.[].eventId'
  outbox dead-letters show 0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a
  outbox dead-letters redrive 0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a
  outbox dead-letters redrive --status 503 --since 2h --dry-run
  outbox dead-letters redrive --all
  outbox dead-letters discard --event-type 'user.*' --status 410 --dry-run
`,

  'dead-letters list': `Usage: outbox dead-letters list [filters] [--json] [--limit <n>] [--after <cursor>] [options]

Lists dead-lettered events, oldest first, with their attempts, last HTTP status and last error (and their
subscription, once one is not the implicit one).

Options:
  --json                 print a JSON array of dead letters (eventId, subscriptionId, subscriptionName, tenant,
                         aggregateType, aggregateId, sequence, eventType, attempts, lastStatus, lastError,
                         lastAttemptAt, createdAt, deadAt, blocksLane, cursor)
  --limit <n>            page size (default ${DEFAULT_LIST_LIMIT}); when a page is full, stderr says how to get the next
  --after <cursor>       the cursor of the last dead letter of the previous page (give the same filters)

Filters (list, redrive, discard; together they narrow with AND):
  --subscription <id|name>   only this subscription's dead letters
  --tenant <tenant>          only events enqueued for this tenant
  --event-type <type>        an exact type (order.paid) or a prefix ending in * (order.*), as subscriptions match
  --aggregate <type>/<id>    only this aggregate's dead letters (e.g. order/42)
  --status <code>            only those whose last attempt got this HTTP status (100-599)
  --since <when>             died at or after: a duration ago (2h, 7d) or an ISO time (2026-01-10T12:00:00Z)
  --until <when>             died before: the same forms
${databaseOptions()}
`,

  'dead-letters show': `Usage: outbox dead-letters show <event-id> [--subscription <id|name>] [--json] [options]

Shows one dead letter in full: its fields, whether it blocks its lane, its last error, the newest answer body the
delivery log holds for it (none when the log is off for it), and its payload as pretty JSON. Text a subscriber or
an event supplied is printed with control characters escaped (\\n, \\u001b), so it cannot act on the terminal.
Exits 1 when the event is not a dead letter.

An event dead in several subscriptions shows its oldest dead letter unless --subscription names one.

Options:
  --subscription <id|name>   this subscription's dead letter of the event
  --json                     print the dead letter as JSON (the list's fields, payload, lastAnswer)
${databaseOptions()}
`,

  'dead-letters redrive': `Usage: outbox dead-letters redrive <event-id>... [options]
       outbox dead-letters redrive --all [options]
       outbox dead-letters redrive <filters> [options]

Puts dead letters back to pending: the same event id and sequence, attempts reset. Each affected lane is locked
while this happens, so a lane never has two requests in flight; a lane parked by --on-exhausted block resumes in
order, starting with the revived event. Under skip (the default) the lane may already have moved past the event:
an ordered consumer then answers stale_ignored, which the relay logs.

Reports which events were redriven and which given ids were not dead letters (unknown, pending or already sent;
those are left unchanged). Exits 0 either way; use --json to act on the lists. --dry-run prints what would be
redriven and changes nothing. A real redrive is recorded in the audit log.

An event is redriven in every subscription where it is dead, unless --subscription names one.

Options:
  --all                  redrive every dead letter
  --dry-run              print what would be redriven; change nothing
  --actor <name>         who asks, as the audit log records it (default: the OS user, else cli)
  --json                 print {"redriven": [...], "notDead": [...], "deliveries": [{"eventId", "subscriptionId"}],
                         "dryRun"}

Filters (list, redrive, discard; together they narrow with AND):
  --subscription <id|name>   only this subscription's dead letters
  --tenant <tenant>          only events enqueued for this tenant
  --event-type <type>        an exact type (order.paid) or a prefix ending in * (order.*), as subscriptions match
  --aggregate <type>/<id>    only this aggregate's dead letters (e.g. order/42)
  --status <code>            only those whose last attempt got this HTTP status (100-599)
  --since <when>             died at or after: a duration ago (2h, 7d) or an ISO time (2026-01-10T12:00:00Z)
  --until <when>             died before: the same forms
${databaseOptions()}
`,

  'dead-letters discard': `Usage: outbox dead-letters discard <event-id>... [--dry-run] [--unblock] [--actor <name>] [options]
       outbox dead-letters discard <filters> [--dry-run] [--unblock] [--actor <name>] [options]

Deletes dead letters for good (dead ones only: a pending or sent event is never touched). Give event ids or at
least one filter: a bare discard is refused, it never deletes every dead letter by accident.

A dead letter that blocks its lane (--on-exhausted block: the lane waits for it) is refused, and nothing is
deleted, unless --unblock: then each such lane is resumed first, as if its dead letter had been skipped (the
events parked behind it are delivered, in order). Recorded in the audit log.

Options:
  --dry-run              print what would be discarded and which lanes resumed; change nothing (a blocker
                         without --unblock is still refused)
  --unblock              allow discarding a lane's blocker, resuming its lane
  --actor <name>         who asks, as the audit log records it (default: the OS user, else cli)
  --json                 print {"dryRun", "discarded": [{"eventId", "subscriptionId"}], "unblocked":
                         [{"subscriptionId", "aggregateType", "aggregateId", "released"}], "notDead": [...]}

Filters (list, redrive, discard; together they narrow with AND):
  --subscription <id|name>   only this subscription's dead letters
  --tenant <tenant>          only events enqueued for this tenant
  --event-type <type>        an exact type (order.paid) or a prefix ending in * (order.*), as subscriptions match
  --aggregate <type>/<id>    only this aggregate's dead letters (e.g. order/42)
  --status <code>            only those whose last attempt got this HTTP status (100-599)
  --since <when>             died at or after: a duration ago (2h, 7d) or an ISO time (2026-01-10T12:00:00Z)
  --until <when>             died before: the same forms
${databaseOptions()}
`,

  deliveries: `Usage: outbox deliveries list [options]

The delivery log: every attempt the relay made, per subscription — when, how long, the HTTP status, the start of
the answer or the error. Open it first when a subscriber says it never got an event.

Commands:
  list      list attempts, newest first            (outbox deliveries list --help)

Examples:
  outbox deliveries list --aggregate order/42
  outbox deliveries list --subscription acme --limit 20
  outbox deliveries list --event 0b9f6c1e-2f4a-4c1b-9a57-3c0f6c1e2f4a --json
`,

  'deliveries list': `Usage: outbox deliveries list [--subscription <s>] [--event <id>] [--aggregate <type>/<id>] [options]

Lists delivery attempts, newest first: outcome (delivered, failed, conflict for a 409, dead for the attempt that
dead-lettered the event), HTTP status, duration in ms, and the answer's first characters or the error, cut to one
line (--json has the whole 500-character excerpt). Which attempts are recorded is the relay's deliveryLog option;
the log is kept until outbox prune --delivery-log-retention deletes it.

Options:
  --subscription <s>     only this subscription's attempts: an id (also of a deleted one) or a name
  --event <id>           only this event's attempts (one history per subscription)
  --aggregate <type>/<id>  only this aggregate's attempts, e.g. order/42
  --json                 print a JSON array of attempts (subscriptionId, eventId, aggregateType, aggregateId,
                         sequence, attemptedAt, durationMs, httpStatus, outcome, answer, error, cursor)
  --limit <n>            page size (default ${DEFAULT_LIST_LIMIT}); when a page is full, stderr says how to get the next
  --after <cursor>       the cursor of the last attempt of the previous page
${databaseOptions()}
`,

  doctor: `Usage: outbox doctor [--json] [--repair] [options]

Checks the rules that keep every aggregate's lane moving and lists each lane that breaks one: pending events with
no lane row, events held at infinity, a lane blocked by a dead letter that is gone (pruned), a 409 park with nothing
pending or whose head was last answered otherwise, a lease longer than --max-lease, a sequence counter behind
its events, pending events of a subscription that no longer exists. A lane is one subscription's view of an
aggregate; lanes of stored subscriptions are shown with the subscription's name. A disabled subscription holding
pending events (with when prune starts to drop them), or that lost some to the disabled retention, is warned
about on stderr. The relay, enqueue, redrive and prune keep these rules, so a violation means damage from outside (a
manual edit, a restore, an older release). Read-only unless --repair.

Heads due for longer than --overdue-after that no relay holds are listed apart, as findings: that is what an outbox
looks like with no relay running. Findings do not fail the check.

With --repair, each lane is mended in a transaction of its own that takes it like a claim: a lane a relay holds
under a live lease is skipped and reported (run again later), and a lease that is too long is only reported (it is
never shortened under its owner). Then the check runs again.

Exits 0 when no rule is broken (with --repair: none is left), and ${EXIT_VIOLATIONS} when one is, so a probe can alert.

Options:
  --json                      print the report as JSON: {"ok", "violations", "findings", "warnings"};
                              with --repair {"lanes", "after"} (after: the check that followed)
  --repair                    mend what the check finds, then check again
  --max-lease <duration>      the longest lease your relays take (default 60s); pass your relays' --lease
                              if larger, or their leases are reported as too long
  --overdue-after <duration>  a due head no relay holds for longer than this is a finding (default 5m)
  --disabled-retention <duration|off>
                              the one outbox prune runs with, if any, for the warnings' dates (default off)
  --limit <n>                 most lanes listed per rule (default ${DEFAULT_DOCTOR_LIMIT})
  --actor <name>              with --repair: who repairs, as the audit log records it (default: the OS user)
${databaseOptions(26)}

Exit codes: 0 no violations · 1 database failure · 2 usage error · ${EXIT_VIOLATIONS} violations (left after --repair)

Examples:
  outbox doctor
  outbox doctor --repair --max-lease 2m
  outbox doctor --json | jq -c '.violations[]'
`,

  lanes: `Usage: outbox lanes <command> [options]

A lane is one subscription's view of one aggregate: its events go out one at a time, in sequence order. These
commands find the lanes that need an operator and move them on. Every action is recorded in the audit log
(outbox audit) under --actor.

Commands:
  list        lanes that are blocked, struggling or held by a relay      (outbox lanes list --help)
  unblock     lift a block or a 409 park                                 (outbox lanes unblock --help)
  skip-head   give up on a lane's next event (it becomes a dead letter)  (outbox lanes skip-head --help)

Examples:
  outbox lanes list --state blocked
  outbox lanes unblock --aggregate order/42 --actor alice
  outbox lanes skip-head --subscription acme --aggregate order/42 --reason "rejected for good, TICKET-7"
`,

  'lanes list': `Usage: outbox lanes list --state blocked|struggling|leased [--subscription <s>] [options]

Lists lanes in one state, with their head (the next event to go: sequence, type, attempts) and their last status
and error:
  blocked     parked by an exhausted event under --on-exhausted block (REASON exhausted, BLOCKER its dead
              letter, whose status and error are shown), or by a 409 from the consumer (REASON conflict);
              oldest block first
  struggling  not blocked, the head failed 3 or more times and is still retried; most attempts first
  leased      a relay holds it under a live lease right now; the lease that ends first first

Options:
  --state <state>        blocked, struggling or leased (required)
  --subscription <s>     only this subscription's lanes: an id or a name
  --limit <n>            most lanes listed (default ${DEFAULT_LIST_LIMIT})
  --json                 print a JSON array of lanes (subscriptionId, subscriptionName, aggregateType, aggregateId,
                         state, reason, blockedAt, leasedUntil, pending, head, blocker)
${databaseOptions()}
`,

  'lanes unblock': `Usage: outbox lanes unblock --aggregate <type>/<id> [--subscription <s>] [--actor <name>] [options]

Lifts a lane's block, in one transaction that waits for open enqueues of the aggregate and never runs under a
relay's lease:
  blocked by an exhausted event  the lane resumes as if that dead letter had been skipped: the events behind it
                                 go next, in order. The dead letter stays dead (outbox dead-letters redrive sends
                                 it again; an ordered consumer may then answer stale_ignored).
  parked by a 409                the park ends and its head is sent at the next claim.

Refused (exit 1) when the lane is not blocked, when a relay holds it (try again after its lease), or when an
enqueue holds it for more than 5 s.

Options:
  --aggregate <type>/<id>  the lane's aggregate, e.g. order/42 (required)
  --subscription <s>       the lane's subscription: an id or a name (default: the implicit one, "default")
  --actor <name>           who acts, as the audit log records it (default: the OS user)
  --json                   print {"outcome", "released", "blockerEventId"}
${databaseOptions(23)}
`,

  'lanes skip-head': `Usage: outbox lanes skip-head --aggregate <type>/<id> [--subscription <s>] [--reason <text>] [options]

Gives up on a lane's head (its next event): it becomes a dead letter whose last error reads
"skipped by <actor>: <reason>", listed and redrivable like any other, and the lane moves on as under
--on-exhausted skip: the events behind it go next, in order, and a 409 park ends. For an event the consumer
will never accept, or a gap it waits for in vain.

Refused (exit 1) on a lane blocked by an exhausted event (unblock it first or redrive its blocker), when nothing
is pending, or while a relay holds the lane.

Options:
  --aggregate <type>/<id>  the lane's aggregate, e.g. order/42 (required)
  --subscription <s>       the lane's subscription: an id or a name (default: the implicit one, "default")
  --reason <text>          why, kept in the event's last error and the audit log
  --actor <name>           who acts, as the audit log records it (default: the OS user)
  --json                   print {"eventId", "sequence", "released"}
${databaseOptions(23)}
`,

  audit: `Usage: outbox audit [--limit <n>] [--before <id>] [--json] [options]

Lists the audit log, newest first: every lane unblock and skip, dead-letter redrive and discard, and integrity
repair made through the API, the CLI or the console, with who did it (its actor), the target and the result.

Options:
  --limit <n>            page size (default ${DEFAULT_LIST_LIMIT}); when a page is full, stderr says how to get the next
  --before <id>          the id of the last entry of the previous page
  --json                 print a JSON array of entries (id, at, actor, action, target, result)
${databaseOptions()}
`,

  secrets: `Usage: outbox secrets reencrypt [--batch-size <n>] [--json] [options]

Encrypts stored subscription secrets at rest (AES-256-GCM), or moves them onto a new key. The keys come from
OUTBOX_SECRET_KEYS (or a file named by OUTBOX_SECRET_KEYS_FILE, one key per line): id:base64 entries of 32
random bytes each (openssl rand -base64 32), comma-separated. The FIRST key encrypts; every key decrypts.

reencrypt puts every secret under the first key: plaintext ones are encrypted, those under another key are
re-encrypted, those already under it are left alone. It runs in batches, each its own short transaction, and is
idempotent: run it again after a failure or a new first key. It prints the counts; a secret under a key not given
stops it with that key's id (add the key back and run again).

Key rotation: 1) put the new key first in OUTBOX_SECRET_KEYS, keeping the old ones, for every relay and every
command that writes secrets (subscriptions create, rotate-secret); 2) run outbox secrets reencrypt; 3) remove the
old keys. A relay lacking a secret's key skips that subscription and says so, naming the key id.

Run it as a database role that may read and write outbox_subscription_secret (the migration role; see the
producer README, "Least privilege").

Options:
  --batch-size <n>       secrets per transaction (default 500)
  --json                 print {"examined", "encrypted", "reencrypted", "unchanged"}
${databaseOptions()}
`,
} as const

/** A help page's key: a command, or `dead-letters <subcommand>`. */
export type HelpTopic = keyof typeof HELP

/** The one-line summaries `outbox --help` lists, in order. */
export const SUMMARIES: readonly (readonly [string, string])[] = [
  ['migrate', 'create or update the producer tables (idempotent)'],
  ['relay', 'deliver pending events to the endpoint until SIGINT/SIGTERM, then stop gracefully'],
  [
    'subscriptions',
    'create, list, update, disable, enable, delete stored subscriptions, or rotate their secrets',
  ],
  ['stats', 'lag, pending, in-flight, struggling, dead and blocked counts (--watch to follow)'],
  ['prune', 'delete sent events (and optionally dead letters) past retention, in bounded batches'],
  ['dead-letters', 'list, show, redrive (same event id and sequence) or discard dead letters'],
  ['deliveries', 'the delivery log: each attempt per subscription, its status, duration and answer'],
  ['doctor', 'check that every lane can move (stuck heads, stale blocks, long leases); --repair mends them'],
  ['lanes', 'list blocked, struggling or leased lanes; unblock one or skip its head'],
  ['audit', 'who unblocked, skipped, redrove, discarded or repaired what'],
  ['secrets', 'encrypt stored subscription secrets, or move them onto a new key (reencrypt)'],
]

/** The text of `outbox --help`. */
export function programHelp(): string {
  const width = Math.max(...SUMMARIES.map(([name]) => name.length))
  const commands = SUMMARIES.map(([name, summary]) => `  ${name.padEnd(width)}  ${summary}`).join('\n')
  return `outbox — run, watch and repair a transactional webhook outbox on PostgreSQL

Usage: outbox <command> [options]

Commands:
${commands}

Every command reads the database from --database-url or DATABASE_URL, and the schema of the producer tables
from --schema or OUTBOX_SCHEMA (default public). The relay also reads OUTBOX_ENDPOINT and OUTBOX_SECRET
(comma-separated for rotation; OUTBOX_SIGNING_SECRET, its old name, is still read). Flags win over the environment. Secrets are never printed.
Connections have deadlines (OUTBOX_DB_*_MS; see outbox relay --help): a silent database fails a command instead
of hanging it.

Options:
  -h, --help     show help (also: outbox <command> --help)
  --version      print the version

Exit codes: 0 success · 1 runtime failure (database, network) · 2 usage error · ${EXIT_PRUNE_NOT_CAUGHT_UP} prune did not catch up or replay left lanes out ·
${EXIT_VIOLATIONS} doctor found violations
`
}

/** True when `--help`/`-h` appears before a `--` terminator: help wins over any other mistake on the line. */
export function wantsHelp(argv: readonly string[]): boolean {
  for (const arg of argv) {
    if (arg === '--') return false
    if (arg === '--help' || arg === '-h') return true
  }
  return false
}
