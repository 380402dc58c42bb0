import { parseArgs } from 'node:util'

/** What one demo run does, from the command line. */
export interface DemoFlags {
  readonly orders: number
  readonly updates: number
  readonly failureRate: number
  readonly dropRate: number
  readonly seed: number
  readonly relays: number
  /** Give up when no event was delivered or dead-lettered for this long. */
  readonly timeoutSeconds: number
}

/** A command line the demo cannot run; the message says what to change. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

export const USAGE = `Usage: pnpm demo [options]

Runs the orders example end to end: an orders service enqueues an event in the transaction of every change, relays
deliver the events as signed webhooks to two subscribers that fail on purpose — billing, and analytics, which fails
far more often and answers late — and the run checks, for each, that every committed event was applied exactly
once and, per order, in order.

Options:
  --orders N          orders to create, many at a time (default 1000)
  --updates N         status changes per order after it is placed, 0 to 4: paid, packed, shipped,
                      delivered (default 3)
  --failure-rate P    share of webhook requests billing answers with HTTP 500 before doing anything
                      (default 0.2); analytics fails 1 − (1 − P)³ of them: about 3 × P, at most 1
  --drop-rate P       share of webhook requests whose answer is dropped AFTER the subscriber committed:
                      the relay sees a network error and sends the event again (default 0.05, both)
  --seed N            seed of the random choices (default: a random one, printed, so a run can be repeated)
  --relays N          relays delivering side by side, 1 to 8 (default 2)
  --timeout S         give up when no event was delivered (or dead-lettered) for S seconds (default 60)
  -h, --help          show this help

PostgreSQL: with DATABASE_URL set, the demo creates three scratch databases on that server (the role needs
CREATEDB) and drops them afterwards; otherwise it starts an embedded PostgreSQL and removes it afterwards.

Exit status: 0 when neither subscriber lost an event or applied one out of order (or twice); 1 otherwise; 2 for a usage
error; 130 when interrupted (Ctrl-C). Everything it started is stopped in every case.`

function number(
  value: string | undefined,
  name: string,
  fallback: number,
  min: number,
  max: number,
  integer: boolean,
): number {
  if (value === undefined) return fallback
  const parsed = Number(value)
  if (value.trim() === '' || !Number.isFinite(parsed) || (integer && !Number.isInteger(parsed))) {
    throw new UsageError(
      `--${name} must be ${integer ? 'a whole number' : 'a number'}, got ${JSON.stringify(value)}`,
    )
  }
  if (parsed < min || parsed > max) {
    throw new UsageError(`--${name} must be from ${min} to ${max}, got ${value}`)
  }
  return parsed
}

/** Parses the demo's command line; `'help'` when help was asked for. Throws {@link UsageError}. */
export function parseDemoFlags(argv: readonly string[]): DemoFlags | 'help' {
  let parsed: ReturnType<typeof parse>
  try {
    parsed = parse(argv[0] === '--' ? argv.slice(1) : argv)
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error))
  }
  const { values } = parsed
  if (values.help) return 'help'
  return {
    orders: number(values.orders, 'orders', 1_000, 1, 1_000_000, true),
    updates: number(values.updates, 'updates', 3, 0, 4, true),
    failureRate: number(values['failure-rate'], 'failure-rate', 0.2, 0, 1, false),
    dropRate: number(values['drop-rate'], 'drop-rate', 0.05, 0, 1, false),
    seed: number(values.seed, 'seed', Math.floor(Math.random() * 1_000_000), 0, 4_294_967_295, true),
    relays: number(values.relays, 'relays', 2, 1, 8, true),
    timeoutSeconds: number(values.timeout, 'timeout', 60, 1, 86_400, false),
  }
}

function parse(args: readonly string[]) {
  return parseArgs({
    args: [...args],
    strict: true,
    allowPositionals: false,
    options: {
      orders: { type: 'string' },
      updates: { type: 'string' },
      'failure-rate': { type: 'string' },
      'drop-rate': { type: 'string' },
      seed: { type: 'string' },
      relays: { type: 'string' },
      timeout: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
}
