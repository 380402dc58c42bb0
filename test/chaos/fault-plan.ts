import type { ArmedKillStyle } from './fault-proxy.js'
import type { SeededRandom } from './seeded-random.js'

/** One scheduled fault; `atMs` counts from the start of the fault phase. */
export type FaultAction =
  | {
      readonly atMs: number
      readonly kind: 'kill-relay'
      readonly relay: number
      /** `timer`: whenever the moment comes; the armed styles wait for the relay's next request. */
      readonly style: 'timer' | ArmedKillStyle
      readonly downMs: number
    }
  | { readonly atMs: number; readonly kind: 'kill-subscriber'; readonly downMs: number }
  | { readonly atMs: number; readonly kind: 'kill-worker'; readonly worker: number; readonly downMs: number }
  | {
      readonly atMs: number
      readonly kind: 'restart-postgres'
      readonly server: 'producer' | 'subscriber'
      readonly downMs: number
    }

/** Shape of a fault plan. */
export interface FaultPlanOptions {
  readonly durationMs: number
  readonly relays: number
  readonly workers: number
  /** Longest subscriber and PostgreSQL outage: poison modes keep outages short so only poison exhausts a finite schedule. */
  readonly maxOutageMs: number
}

function spaced(
  random: SeededRandom,
  durationMs: number,
  gapMs: readonly [number, number],
  make: (atMs: number) => FaultAction,
): FaultAction[] {
  const actions: FaultAction[] = []
  // Bounded: every step moves at least gapMs[0] forward.
  for (let at = random.int(500, gapMs[1]); at < durationMs - 500; at += random.int(gapMs[0], gapMs[1])) {
    actions.push(make(at))
  }
  return actions
}

/**
 * Draws the whole fault plan from the seed before anything starts, so a replay with the same seed and duration
 * brings the same kills, restarts and outages at the same moments (the interleaving with the processes' own
 * timing is the operating system's).
 */
export function planFaults(random: SeededRandom, options: FaultPlanOptions): FaultAction[] {
  const { durationMs, maxOutageMs } = options
  const actions: FaultAction[] = [
    ...spaced(random.fork('relay-kills'), durationMs, [2500, 6000], (atMs) => {
      const r = random.fork(`relay-kill-${atMs}`)
      return {
        atMs,
        kind: 'kill-relay',
        relay: r.int(0, options.relays - 1),
        style: r.weighted({ timer: 2, 'mid-request': 2, 'after-apply': 1 }),
        downMs: r.int(100, 1500),
      }
    }),
    ...spaced(random.fork('subscriber-kills'), durationMs, [6000, 12_000], (atMs) => ({
      atMs,
      kind: 'kill-subscriber',
      downMs: random.fork(`subscriber-kill-${atMs}`).int(100, maxOutageMs),
    })),
    ...spaced(random.fork('worker-kills'), durationMs, [10_000, 20_000], (atMs) => {
      const r = random.fork(`worker-kill-${atMs}`)
      return { atMs, kind: 'kill-worker', worker: r.int(0, options.workers - 1), downMs: r.int(100, 1000) }
    }),
  ]
  // PostgreSQL restarts once per server: the producer's in the first half (commits, claims and marks in flight),
  // the subscriber's later (dedupe transactions in flight).
  const pg = random.fork('postgres')
  actions.push({
    atMs: Math.round(durationMs * (0.3 + 0.2 * pg.next())),
    kind: 'restart-postgres',
    server: 'producer',
    downMs: pg.int(300, maxOutageMs),
  })
  actions.push({
    atMs: Math.round(durationMs * (0.6 + 0.2 * pg.next())),
    kind: 'restart-postgres',
    server: 'subscriber',
    downMs: pg.int(300, maxOutageMs),
  })
  return actions.sort((a, b) => a.atMs - b.atMs)
}
