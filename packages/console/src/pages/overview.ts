import type { DeliveryAttempt, OutboxStats, Subscription, SubscriptionStats } from '@outbox/producer'
import { html, type SafeHtml } from '../html.js'
import { formatTime, layout, link, type PageContext } from './layout.js'

/** What the overview shows: the stats snapshot, the subscriptions, and each one's last failed attempt. */
export interface OverviewData {
  readonly stats: OutboxStats
  readonly subscriptions: readonly Subscription[]
  /** By subscription id: the newest failed attempt in the delivery log, if it recorded one. */
  readonly lastFailures: ReadonlyMap<string, DeliveryAttempt>
}

/**
 * The endpoint's host, never the whole URL: a query string or userinfo in a webhook URL may carry a credential
 * (`?key=…`), and the console is read by more people than those who set it.
 */
export function urlHost(url: string | null): string {
  if (url === null) return 'the relay’s endpoint'
  try {
    return new URL(url).host
  } catch {
    return '(unreadable URL)'
  }
}

function failure(attempt: DeliveryAttempt | undefined): SafeHtml | string {
  if (attempt === undefined) return '—'
  const what = attempt.httpStatus === null ? (attempt.error ?? 'no answer') : `HTTP ${attempt.httpStatus}`
  return html`<span class="failure">${what}</span> <small>${formatTime(attempt.attemptedAt)}</small>`
}

function breaker(share: SubscriptionStats, subscription: Subscription | undefined): SafeHtml {
  const since = subscription?.endpoint.openedAt
  return html`<span class="breaker ${share.breaker}">${share.breaker}</span>${
    share.breaker !== 'closed' && since ? html` <small>since ${formatTime(since)}</small>` : ''
  }`
}

function count(ctx: PageContext, value: number, path: string, query: Record<string, string>): SafeHtml {
  return value === 0 ? html`0` : link(ctx, path, String(value), query)
}

/** `/`: every subscription's figures, the totals, the charts, and the ways into what needs fixing. */
export function overviewPage(ctx: PageContext, data: OverviewData): string {
  const { stats } = data
  const byId = new Map(data.subscriptions.map((subscription) => [subscription.id, subscription]))
  const rows = stats.subscriptions.map((share) => {
    const subscription = byId.get(share.id)
    const only = { subscription: share.id }
    return html`<tr>
<td>${share.name ?? share.id}${share.state === 'disabled' ? html` <small class="muted">(disabled)</small>` : ''}</td>
<td>${urlHost(subscription?.url ?? null)}</td>
<td class="num">${share.pending}</td>
<td class="num">${share.inFlight}</td>
<td class="num">${count(ctx, share.struggling, '/lanes', { state: 'struggling', ...only })}</td>
<td class="num">${count(ctx, share.dead, '/dead-letters', only)}</td>
<td class="num">${count(ctx, share.blocked, '/lanes', { state: 'blocked', ...only })}</td>
<td>${breaker(share, subscription)}</td>
<td>${failure(data.lastFailures.get(share.id))}</td>
</tr>`
  })
  const body = html`<p class="summary">
<span class="figure">lag <b data-figure="lag">${Math.round(stats.lagSeconds)}</b> s</span>
<span class="figure">pending <b data-figure="pending">${stats.pending}</b></span>
<span class="figure">in flight <b data-figure="in-flight">${stats.inFlight}</b></span>
<span class="figure">${link(ctx, '/lanes', html`<b data-figure="blocked">${stats.blocked}</b> blocked lanes`, { state: 'blocked' })}</span>
<span class="figure">${link(ctx, '/lanes', html`<b data-figure="struggling">${stats.struggling}</b> struggling lanes`, { state: 'struggling' })}</span>
<span class="figure">${link(ctx, '/dead-letters', html`<b data-figure="dead">${stats.dead}</b> dead letters`)}</span>
</p>
${stats.warnings.length > 0 ? html`<ul class="warnings">${stats.warnings.map((warning) => html`<li>${warning}</li>`)}</ul>` : ''}
<table class="subscriptions">
<thead><tr><th>Subscription</th><th>Endpoint</th><th>Pending</th><th>In flight</th><th>Struggling</th><th>Dead</th><th>Blocked</th><th>Breaker</th><th>Last failure</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No subscriptions.</td></tr>`}</tbody>
<tfoot><tr><th>Total</th><td></td><td class="num">${stats.pending}</td><td class="num">${stats.inFlight}</td><td class="num">${stats.struggling}</td><td class="num">${stats.dead}</td><td class="num">${stats.blocked}</td><td></td><td></td></tr></tfoot>
</table>`
  return layout(ctx, { title: 'Overview', body, charts: true })
}
