import type { BenchDatabases } from './databases.js'

/** What every case gets from the runner. */
export interface BenchContext {
  /** Smaller sizes and fewer runs (CI's smoke run); the ratios are still computed in the same run. */
  readonly quick: boolean
  /** Seed of every random choice in the workloads. */
  readonly seed: number
  /** Runs per measured system (≥ 3 unless a case says why not). */
  readonly runs: number
  readonly databases: BenchDatabases
  /** Progress line on stderr. */
  readonly log: (message: string) => void
}
