import type { ChaosRunResult } from './run-chaos.js'

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** The figures of one run as a few aligned lines, then every broken invariant with its examples. */
export function formatReport(result: ChaosRunResult): string {
  const { database: db, workers, relays, proxy, faults, ledger } = result
  const requestsToSubscriber =
    proxy.answers.applied + proxy.answers.duplicate_ignored + proxy.answers.stale_ignored
  const lines = [
    `mode ${result.mode}, seed ${result.seed}: faults ${seconds(result.durationMs)}, drain ${seconds(result.drainMs)}, total ${seconds(result.totalMs)}`,
    `  events committed      ${db.eventsCommitted} in ${db.transactionsCommitted} transactions over ${db.aggregates} aggregates (from the producer database)`,
    `  rolled back           ${workers.rolledBack ?? 0} transactions with ${workers.rolledBackEvents ?? 0} events (on purpose); ${workers.failed ?? 0} transactions failed by faults, outcome left to the database`,
    `  delivered             ${db.sent} sent, ${db.dead} dead-lettered, ${db.pending} pending (${db.stalled} behind blocked heads), ${db.blockedLanes} lanes blocked${db.poisonCommitted > 0 ? `; ${db.poisonCommitted} poison events committed` : ''}`,
    `  attempts              ${db.attempts} (outbox attempts, takeovers included); ${proxy.requests} requests reached the proxy`,
    `  injected              ${Object.entries(proxy.faults)
      .filter(([kind]) => kind !== 'pass')
      .map(([kind, count]) => `${kind} ${count}`)
      .join(', ')}; ${proxy.lateForwards} late arrivals`,
    `  giving up             maxAttempts ${ledger.maxAttempts}, horizon ${seconds(ledger.horizonMs)}; ${proxy.faults.unavailable503 + proxy.faults.throttled429} Retry-After answers (${proxy.retryAfterStreaks} events got a streak of them); ${ledger.sentPastMaxAttempts} sent events failed ≥ maxAttempts times first (most ${ledger.mostFailuresBeforeSent}); ${db.dead} dead${ledger.deadFewestRequests === null ? '' : ` after ≥ ${ledger.deadFewestRequests} requests and ≥ ${seconds(ledger.deadShortestSpanMs ?? 0)} from the first (${seconds(ledger.deadShortestRecordedSpanMs ?? 0)} by the outbox's first_failed_at)`}${db.deadApplied > 0 ? `, ${db.deadApplied} of them applied anyway (answer lost)` : ''} (by the proxy's count)`,
    `  subscriber answered   applied ${proxy.answers.applied}, duplicate_ignored ${proxy.answers.duplicate_ignored}, stale_ignored ${proxy.answers.stale_ignored}, 409 ${proxy.answers.conflict}, 5xx ${proxy.answers.error}, unreachable ${proxy.answers.unreachable}`,
    `  duplicates absorbed   ${proxy.answers.duplicate_ignored} duplicate_ignored answers; deliveries − applied = ${requestsToSubscriber} − ${db.applied} = ${requestsToSubscriber - db.applied}${db.deadRecordedStale > 0 ? `; ${db.deadRecordedStale} late copies of dead letters recorded stale` : ''}`,
    `  relays reported       ${relays.takeovers ?? 0} lane takeovers, ${relays.errors ?? 0} relay errors (database away), ${relays.retries ?? 0} retries: ${Object.entries(
      relays,
    )
      .filter(([name]) => name.startsWith('retry'))
      .map(([name, count]) => `${name.slice('retry'.length)} ${count}`)
      .join(', ')}`,
    `  subscriber load       slowest round trip ${proxy.forwardMs.max} ms, ${proxy.forwardMs.overRelayTimeout} slower than the relays' timeout; ${proxy.answersToNobody} 2xx answers found their relay gone; at most ${result.subscriber.maxConcurrent ?? 0} requests at once in the subscriber`,
    `  machine               worst event-loop stall ${result.lagMaxMs.orchestrator} ms in the orchestrator (proxy), ${result.lagMaxMs.relays} ms in a relay, ${result.lagMaxMs.subscriber} ms in the subscriber`,
    `  kills (SIGKILL)       relays ${faults.relayKills.timer + faults.relayKills.midRequest + faults.relayKills.afterApply} (${faults.relayKills.timer} at random, ${faults.relayKills.midRequest} mid-request, ${faults.relayKills.afterApply} after the subscriber applied; ${proxy.openAtKills} requests open at them), subscriber ${faults.subscriberKills}, workers ${faults.workerKills}; ${faults.skipped} planned faults skipped (target still restarting, last relay up, or not in this mode)`,
    `  liveness              checkIntegrity after the drain: ${result.violations.some((violation) => violation.invariant.includes('checkIntegrity')) ? 'BROKEN (below)' : 'every lane live'}, ${db.integrityFindings} findings`,
    `  restarts              relays ${faults.restarts.relay}, subscriber ${faults.restarts.subscriber}, workers ${faults.restarts.worker}, PostgreSQL producer ${faults.postgresRestarts.producer} / subscriber ${faults.postgresRestarts.subscriber}`,
  ]
  if (result.violations.length === 0) lines.push('  invariants            all hold')
  for (const violation of result.violations) {
    lines.push(`  BROKEN: ${violation.invariant} — ${violation.detail}`)
    for (const example of violation.examples) lines.push(`      ${example}`)
  }
  return lines.join('\n')
}
