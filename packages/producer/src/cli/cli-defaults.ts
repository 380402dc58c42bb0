/** Defaults of the CLI's own options (the library's defaults are documented by the library). */

/** `outbox relay --stop-timeout`: how long shutdown waits for in-flight requests before aborting them. */
export const DEFAULT_STOP_TIMEOUT_MS = 10_000
/** `outbox stats --watch --interval`. */
export const DEFAULT_WATCH_INTERVAL_MS = 2000
/** The shortest `--interval`: faster refreshes only load the database. */
export const MIN_WATCH_INTERVAL_MS = 100
/** `outbox dead-letters list --limit`. */
export const DEFAULT_LIST_LIMIT = 100
/** `outbox doctor --limit`: most lanes listed per rule, so a badly damaged outbox still gives a readable report. */
export const DEFAULT_DOCTOR_LIMIT = 100

/** Exit code of a runtime failure (database, network). */
export const EXIT_FAILURE = 1
/** Exit code of a usage error (unknown command or flag, missing option, bad value). */
export const EXIT_USAGE = 2
/** Exit code of a prune that stopped before catching up, so cron can alert on it. */
export const EXIT_PRUNE_NOT_CAUGHT_UP = 3
/** Exit code of `outbox doctor` when a liveness rule is broken (after `--repair`: still broken), so a probe can alert. */
export const EXIT_VIOLATIONS = 4
