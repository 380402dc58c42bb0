/**
 * The warning `checkIntegrity` (and so `outbox doctor`) gives about a subscription whose backfill runs: it delivers
 * nothing until the copy is done, which is by design, but a copy that waits on a transaction holding an aggregate
 * (an enqueue left open) makes no progress until that transaction ends, and an operator should know.
 */
export function backfillWarning(backfill: {
  readonly id: string
  readonly name: string | null
  readonly aggregatesDone: number
  readonly aggregatesTotal: number | null
  readonly events: number
  readonly waitingSince: Date | null
}): string {
  const { id, name, aggregatesDone, aggregatesTotal, events, waitingSince } = backfill
  const progress = `${aggregatesDone}${aggregatesTotal === null ? '' : ` of ${aggregatesTotal}`} aggregates, ${events} events copied`
  const stalled =
    waitingSince === null
      ? ''
      : `; waiting since ${waitingSince.toISOString()} for a transaction holding one of its aggregates (an enqueue left open?)`
  return `subscription ${name ?? id} is backfilling (${progress})${stalled}: it delivers once the copy is done`
}
