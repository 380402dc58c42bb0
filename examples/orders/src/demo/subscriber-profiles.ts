import type { DemoFlags } from './flags.js'

/** How one of the demo's subscribers behaves, and how patiently it is retried. */
export interface SubscriberProfile {
  /** The subscription's name, and part of the subscriber's database name. */
  readonly name: string
  /** Share of webhook requests answered 500 before anything runs. */
  readonly failureRate: number
  /** Share of the others whose answer is cut off after the subscriber committed. */
  readonly dropRate: number
  /** Every request held this long first (ms, uniformly random): a slow subscriber. */
  readonly delayMs?: { readonly min: number; readonly max: number }
  /** The subscription's own retry schedule (ms): `length + 1` attempts, then dead letter. */
  readonly retrySchedule: readonly number[]
  /** What it does wrong, for the header. */
  readonly behaviour: string
}

/** Milliseconds instead of the production schedule's seconds to hours: 11 attempts within about 3 s. */
export const RETRY_SCHEDULE_MS: readonly number[] = [5, 10, 20, 40, 80, 160, 320, 640, 1_000, 1_000]

/**
 * The misbehaving subscriber's schedule: 25 attempts within about 5 s. With its failure rate near 50%, 11
 * attempts would let about one event in 2,700 fail every time — a real loss the check would rightly report —
 * where 25 make that about one in 60 million. Production schedules span a day; the demo only squeezes them.
 */
export const PATIENT_RETRY_SCHEDULE_MS: readonly number[] = [5, 10, 20, 40, 80, 160, ...Array(18).fill(250)]

/** How late the misbehaving subscriber answers: enough that it lags behind the other one. */
const SLOW_ANSWER_MS = { min: 20, max: 100 } as const

const percent = (rate: number) => `${Math.round(rate * 1000) / 10}%`

/**
 * The demo's two subscribers, each a service with its own database behind its own subscription: `billing`
 * fails as often as `--failure-rate` says; `analytics` misbehaves — it fails as if it depended on three
 * services each failing that often (`1 − (1 − rate)³`: about three times the rate when it is small, never
 * above 100%, 0 when it is 0) and answers every request 20–100 ms late — to show that one subscriber's trouble
 * neither loses nor reorders the other's events, nor its own.
 */
export function subscriberProfiles(flags: DemoFlags): readonly SubscriberProfile[] {
  const analyticsFailureRate = 1 - (1 - flags.failureRate) ** 3
  return [
    {
      name: 'billing',
      failureRate: flags.failureRate,
      dropRate: flags.dropRate,
      retrySchedule: RETRY_SCHEDULE_MS,
      behaviour: `fails ${percent(flags.failureRate)} of webhooks and drops ${percent(flags.dropRate)} of answers after committing`,
    },
    {
      name: 'analytics',
      failureRate: analyticsFailureRate,
      dropRate: flags.dropRate,
      delayMs: SLOW_ANSWER_MS,
      retrySchedule: PATIENT_RETRY_SCHEDULE_MS,
      behaviour: `misbehaves: fails ${percent(analyticsFailureRate)} of webhooks, drops ${percent(flags.dropRate)} of answers after committing, and answers ${SLOW_ANSWER_MS.min}–${SLOW_ANSWER_MS.max} ms late`,
    },
  ]
}
