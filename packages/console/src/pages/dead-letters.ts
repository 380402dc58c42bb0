import type { DeadLetter, Subscription } from '@outbox/producer'
import { html } from '../html.js'
import { actionForm, formatTime, layout, link, type PageContext } from './layout.js'

/** The filter form's fields, as the query string carries them (empty ones absent). */
export interface DeadLetterQuery {
  readonly subscription?: string
}

/** `/dead-letters`: the filter form, the matching dead letters, and (for users who can act) redrive buttons. */
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
  const options = data.subscriptions.map(
    (subscription) =>
      html`<option value="${subscription.id}"${query.subscription === subscription.id ? html` selected` : ''}>${
        subscription.name ?? subscription.id
      }</option>`,
  )
  const form = html`<form method="get" action="${ctx.base}/dead-letters" class="filters">
<label>Subscription <select name="subscription"><option value="">any</option>${options}</select></label>
<button type="submit">Filter</button>
</form>`
  const rows = data.deadLetters.map(
    (dead) => html`<tr>
<td>${link(ctx, `/events/${dead.eventId}`, dead.eventId)}</td>
<td>${dead.subscriptionName ?? dead.subscriptionId}</td>
<td>${dead.tenant ?? '—'}</td>
<td>${dead.aggregateType}/${dead.aggregateId} #${dead.sequence}</td>
<td>${dead.eventType}</td>
<td class="num">${dead.attempts}</td>
<td>${dead.lastStatus ?? 'no answer'}</td>
<td class="error-text">${dead.lastError ?? ''}</td>
<td>${formatTime(dead.deadAt)}</td>
${
  ctx.canAct
    ? html`<td>${actionForm(ctx, '/dead-letters/redrive', { eventId: dead.eventId, subscriptionId: dead.subscriptionId }, 'Redrive')}</td>`
    : ''
}
</tr>`,
  )
  const body = html`${form}
<p>${data.deadLetters.length === data.limit ? `The first ${data.limit} matching dead letters, oldest first.` : `${data.deadLetters.length} matching dead letters, oldest first.`}</p>
<table class="dead-letters">
<thead><tr><th>Event</th><th>Subscription</th><th>Tenant</th><th>Aggregate</th><th>Type</th><th>Attempts</th><th>Last status</th><th>Last error</th><th>Dead since</th>${ctx.canAct ? html`<th></th>` : ''}</tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="10">No dead letters match.</td></tr>`}</tbody>
</table>`
  return layout(ctx, { title: 'Dead letters', body })
}
