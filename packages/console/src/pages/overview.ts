import {
  type DeliveryAttempt,
  isAutoDisableReason,
  type OutboxStats,
  type Subscription,
  type SubscriptionStats,
} from '@outbox/producer'
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

/** What each reason a relay disables a subscription for means, for the operator reading the overview. */
const AUTO_DISABLE_TEXT: Readonly<Record<string, string>> = {
  gone: 'gone: its endpoint answered 410 Gone',
}

/**
 * The subscriptions a relay disabled by itself (a `410 Gone`), with why and since when: nothing else tells an
 * operator, and their events wait (prune keeps them unless run with a disabled retention) until someone enables or
 * deletes them.
 */
function autoDisabled(data: OverviewData): SafeHtml | string {
  const shares = data.stats.subscriptions.filter(
    (share) => share.state === 'disabled' && isAutoDisableReason(share.disabledReason),
  )
  if (shares.length === 0) return ''
  const byId = new Map(data.subscriptions.map((subscription) => [subscription.id, subscription]))
  return html`<section class="auto-disabled">
<h2>Disabled automatically</h2>
<table class="subscriptions auto-disabled">
<thead><tr><th>Subscription</th><th>Endpoint</th><th>Reason</th><th>Since</th><th>Pending</th></tr></thead>
<tbody>${shares.map(
    (share) => html`<tr data-subscription="${share.id}">
<td data-label="Subscription">${share.name ?? share.id}</td>
<td data-label="Endpoint">${urlHost(byId.get(share.id)?.url ?? null)}</td>
<td data-label="Reason" data-reason="${share.disabledReason ?? ''}">${AUTO_DISABLE_TEXT[share.disabledReason ?? ''] ?? share.disabledReason}</td>
<td data-label="Since">${formatTime(share.disabledAt)}</td>
<td data-label="Pending" class="num">${share.pending}</td>
</tr>`,
  )}</tbody>
</table>
<p class="muted">Their events are kept. Enable a subscription once its endpoint is back (<code>outbox subscriptions enable</code>), or delete it.</p>
</section>`
}

function count(ctx: PageContext, value: number, path: string, query: Record<string, string>): SafeHtml {
  return value === 0 ? html`0` : link(ctx, path, String(value), query)
}

/**
 * `/`: every subscription's figures, the totals, the charts, the subscriptions a relay disabled by itself (reason and
 * since when), and the ways into what needs fixing.
 */
export function overviewPage(ctx: PageContext, data: OverviewData): string {
  const { stats } = data
  const byId = new Map(data.subscriptions.map((subscription) => [subscription.id, subscription]))
  const rows = stats.subscriptions.map((share) => {
    const subscription = byId.get(share.id)
    const only = { subscription: share.id }
    return html`<tr>
<td data-label="Subscription">${share.name ?? share.id}${share.state === 'disabled' ? html` <small class="muted">(disabled${isAutoDisableReason(share.disabledReason) ? `: ${share.disabledReason}` : ''})</small>` : ''}</td>
<td data-label="Endpoint">${urlHost(subscription?.url ?? null)}</td>
<td data-label="Pending" class="num">${share.pending}</td>
<td data-label="In flight" class="num">${share.inFlight}</td>
<td data-label="Struggling" class="num">${count(ctx, share.struggling, '/lanes', { state: 'struggling', ...only })}</td>
<td data-label="Dead" class="num">${count(ctx, share.dead, '/dead-letters', only)}</td>
<td data-label="Blocked" class="num">${count(ctx, share.blocked, '/lanes', { state: 'blocked', ...only })}</td>
<td data-label="Breaker">${breaker(share, subscription)}</td>
<td data-label="Last failure" class="last-failure">${failure(data.lastFailures.get(share.id))}</td>
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
${autoDisabled(data)}
${stats.warnings.length > 0 ? html`<ul class="warnings">${stats.warnings.map((warning) => html`<li>${warning}</li>`)}</ul>` : ''}
<table class="subscriptions">
<thead><tr><th>Subscription</th><th>Endpoint</th><th>Pending</th><th>In flight</th><th>Struggling</th><th>Dead</th><th>Blocked</th><th>Breaker</th><th>Last failure</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No subscriptions.</td></tr>`}</tbody>
<tfoot><tr><th>Total</th><td></td><td data-label="Pending" class="num">${stats.pending}</td><td data-label="In flight" class="num">${stats.inFlight}</td><td data-label="Struggling" class="num">${stats.struggling}</td><td data-label="Dead" class="num">${stats.dead}</td><td data-label="Blocked" class="num">${stats.blocked}</td><td></td><td></td></tr></tfoot>
</table>`
  return layout(ctx, { title: 'Overview', body, charts: true })
}
