import type { DeadLetter, Subscription } from '@outbox/producer'
import { DEAD_LETTER_QUERY_FIELDS, type DeadLetterQuery, hasFilter } from '../dead-letter-query.js'
import { html } from '../html.js'
import { actionForm, formatTime, layout, link, type PageContext } from './layout.js'

const LABELS: Readonly<Record<(typeof DEAD_LETTER_QUERY_FIELDS)[number], string>> = {
  subscription: 'Subscription',
  tenant: 'Tenant',
  eventType: 'Event type (order.*)',
  aggregateType: 'Aggregate type',
  aggregateId: 'Aggregate id',
  status: 'Last status',
  since: 'Since (2h or ISO time)',
}

/** The filter form of the dead-letters page (GET: a filter is a link that can be shared). */
export function filterForm(ctx: PageContext, query: DeadLetterQuery, subscriptions: readonly Subscription[]) {
  const options = subscriptions.map(
    (subscription) =>
      html`<option value="${subscription.id}"${query.subscription === subscription.id ? html` selected` : ''}>${
        subscription.name ?? subscription.id
      }</option>`,
  )
  const inputs = DEAD_LETTER_QUERY_FIELDS.filter((name) => name !== 'subscription').map(
    (name) => html`<label>${LABELS[name]} <input name="${name}" value="${query[name] ?? ''}"></label>`,
  )
  return html`<form method="get" action="${ctx.base}/dead-letters" class="filters">
<label>${LABELS.subscription} <select name="subscription"><option value="">any</option>${options}</select></label>
${inputs}
<button type="submit">Filter</button>
</form>`
}

/** `/dead-letters`: the filter form, the matching dead letters, and (for users who can act) redrive and discard. */
export function deadLettersPage(
  ctx: PageContext,
  data: {
    readonly query: DeadLetterQuery
    readonly subscriptions: readonly Subscription[]
    readonly deadLetters: readonly DeadLetter[]
    readonly limit: number
  },
): string {
  const { query } = data
  const rows = data.deadLetters.map(
    (dead) => html`<tr>
<td data-label="Event">${link(ctx, `/events/${dead.eventId}`, dead.eventId)}${dead.blocksLane ? html`<br><small class="blocks">blocks its lane</small>` : ''}</td>
<td data-label="Subscription">${dead.subscriptionName ?? dead.subscriptionId}</td>
<td data-label="Tenant">${dead.tenant ?? '—'}</td>
<td data-label="Aggregate">${dead.aggregateType}/${dead.aggregateId} #${dead.sequence}</td>
<td data-label="Type">${dead.eventType}</td>
<td data-label="Attempts" class="num">${dead.attempts}</td>
<td data-label="Last status">${dead.lastStatus ?? 'no answer'}</td>
<td data-label="Last error" class="error-text">${dead.lastError ?? ''}</td>
<td data-label="Dead since">${formatTime(dead.deadAt)}</td>
${
  ctx.canAct
    ? html`<td>${actionForm(ctx, '/dead-letters/redrive', { eventId: dead.eventId, subscriptionId: dead.subscriptionId }, 'Redrive')}</td>`
    : ''
}
</tr>`,
  )
  const bulk =
    ctx.canAct && data.deadLetters.length > 0
      ? hasFilter(query)
        ? html`<p class="bulk">${actionForm(ctx, '/dead-letters/redrive-matching', { ...query }, 'Redrive all matching…')}
${actionForm(ctx, '/dead-letters/discard', { ...query }, 'Discard all matching…', {
  danger: true,
  extra: html`<label><input type="checkbox" name="unblockLanes" value="1"> also unblock their lanes</label> `,
})}
<small>Each shows a dry-run preview first.</small></p>`
        : html`<p class="bulk"><small>Filter first to redrive or discard many at once.</small></p>`
      : ''
  const count =
    data.deadLetters.length === data.limit
      ? `The first ${data.limit} matching dead letters, oldest first.`
      : `${data.deadLetters.length} matching dead letters, oldest first.`
  const body = html`${filterForm(ctx, query, data.subscriptions)}
<p>${count}</p>
${bulk}
<table class="dead-letters">
<thead><tr><th>Event</th><th>Subscription</th><th>Tenant</th><th>Aggregate</th><th>Type</th><th>Attempts</th><th>Last status</th><th>Last error</th><th>Dead since</th>${ctx.canAct ? html`<th></th>` : ''}</tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="10">No dead letters match.</td></tr>`}</tbody>
</table>`
  return layout(ctx, { title: 'Dead letters', body })
}
