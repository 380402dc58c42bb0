/** A backlog of `events` events spread round-robin over `aggregates` aggregates. */
export interface Backlog {
  readonly events: number
  readonly aggregates: number
}

/** Event `n` of a backlog: its aggregate, its per-aggregate sequence (from 1) and its payload. */
export function backlogEvent(backlog: Backlog, n: number) {
  const aggregateId = String(n % backlog.aggregates)
  const sequence = Math.floor(n / backlog.aggregates) + 1
  return {
    aggregateId,
    sequence,
    eventType: 'order.updated',
    payload: { order_id: aggregateId, n, seq: sequence, status: 'paid' },
  }
}
