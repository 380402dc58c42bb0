import type { OrderReport } from './order-tracker.js'
import { median, round } from './stats.js'

/** One system's figure in one case: every run and their median. */
export interface Measurement {
  readonly system: string
  readonly metric: string
  readonly runs: readonly number[]
  readonly median: number
  /**
   * Per-run order reports, for systems delivering to the sink. `enforced` for our relay: a broken order there fails
   * the run. A baseline's broken order is a finding about that baseline, reported but not failing the run.
   */
  readonly order?: { readonly ok: boolean; readonly enforced: boolean; readonly runs: readonly OrderReport[] }
  /** Context (percentiles, counts) that is not itself the compared figure. */
  readonly detail?: Record<string, unknown>
}

/** A ratio of two medians from the same run, against its target. */
export interface Comparison {
  readonly label: string
  readonly ratio: number
  /** E.g. `≥ 6×`, or `reported` when the issue asks only for the figure. */
  readonly target: string
  /** `null` for figures without a target. */
  readonly met: boolean | null
}

/** Everything one case produced. */
export interface CaseResult {
  readonly id: string
  readonly title: string
  readonly measurements: Measurement[]
  readonly comparisons: Comparison[]
  readonly notes: string[]
  seconds: number
  /** Set when the case crashed; the run then exits non-zero. */
  error?: string
}

/** Builds a {@link Measurement} from run values (and the order reports of those runs, if any). */
export function measurement(
  system: string,
  metric: string,
  runs: readonly number[],
  extra: {
    order?: readonly OrderReport[]
    /** False for baselines: their order is checked and reported, and only ours fails the run. @defaultValue true */
    enforceOrder?: boolean
    detail?: Record<string, unknown>
  } = {},
): Measurement {
  const result: Measurement = {
    system,
    metric,
    runs: runs.map(round),
    median: round(median(runs)),
    ...(extra.detail ? { detail: extra.detail } : {}),
    ...(extra.order
      ? {
          order: {
            ok: extra.order.every(
              (report) => report.violations === 0 && (report.complete || report.capped === true),
            ),
            enforced: extra.enforceOrder ?? true,
            runs: extra.order,
          },
        }
      : {}),
  }
  return result
}

/** Compares two medians: `ratio = numerator ÷ denominator`, met when `ratio ≥ min` (or `≤ max`). */
export function compare(
  label: string,
  numerator: number,
  denominator: number,
  bound: { min?: number; max?: number } = {},
): Comparison {
  const ratio = round(numerator / denominator)
  if (bound.min !== undefined) return { label, ratio, target: `≥ ${bound.min}×`, met: ratio >= bound.min }
  if (bound.max !== undefined) return { label, ratio, target: `≤ ${bound.max}×`, met: ratio <= bound.max }
  return { label, ratio, target: 'reported', met: null }
}

function pad(text: string, width: number): string {
  return text.length >= width ? text : text + ' '.repeat(width - text.length)
}

function orderText(m: Measurement): string {
  if (!m.order) return ''
  const violations = m.order.runs.reduce((sum, run) => sum + run.violations, 0)
  const duplicates = m.order.runs.reduce((sum, run) => sum + run.duplicates, 0)
  const incomplete = m.order.runs.filter((run) => !run.complete).length
  const capped = m.order.runs.filter((run) => run.capped).length
  const parts = [m.order.ok ? 'order ok' : m.order.enforced ? 'ORDER FAILED' : 'order BROKEN (baseline)']
  if (violations > 0) parts.push(`${violations} out of order`)
  if (duplicates > 0) parts.push(`${duplicates} dup`)
  if (capped > 0) parts.push(`${capped} run(s) time-capped`)
  if (incomplete > capped) parts.push(`${incomplete - capped} run(s) INCOMPLETE`)
  return parts.join(', ')
}

/** Renders all cases as a plain-text table. */
export function renderTable(cases: readonly CaseResult[]): string {
  const lines: string[] = []
  for (const result of cases) {
    lines.push('', `== ${result.title} (${result.seconds.toFixed(1)} s)`)
    if (result.error) lines.push(`   CRASHED: ${result.error}`)
    for (const m of result.measurements) {
      lines.push(
        `   ${pad(m.system, 44)} ${pad(`${m.median} ${m.metric}`, 22)} runs ${pad(m.runs.join(' / '), 30)} ${orderText(m)}`,
      )
    }
    for (const c of result.comparisons) {
      const verdict = c.met === null ? '' : c.met ? 'met' : 'MISSED'
      lines.push(`   -> ${pad(c.label, 41)} ${pad(`${c.ratio}×`, 22)} target ${pad(c.target, 10)} ${verdict}`)
    }
    for (const note of result.notes) lines.push(`   note: ${note}`)
  }
  return lines.join('\n')
}
