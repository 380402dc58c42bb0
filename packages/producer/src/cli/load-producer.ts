/** The library's public API, as the CLI uses it. */
export type Producer = typeof import('../index.js')

/**
 * Loads the library when a command needs it. Loading it (with Kysely, pg and the HTTP client) costs most of a
 * run's start-up, so a command first checks what it can on its own — unknown flags, numbers, required options,
 * the URL's shape — and a mistyped command line is answered at once.
 */
export function loadProducer(): Promise<Producer> {
  return import('../index.js')
}
