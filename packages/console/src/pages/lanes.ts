import type { LaneState, LaneSummary, Subscription } from '@outbox/producer'
import { html } from '../html.js'
import { actionForm, formatTime, layout, link, type PageContext } from './layout.js'

/** The lane states the page lists, in tab order. */
export const LANE_STATES: readonly LaneState[] = ['blocked', 'struggling', 'leased']

function laneFields(lane: LaneSummary) {
  return {
    subscriptionId: lane.subscriptionId,
    aggregateType: lane.aggregateType,
    aggregateId: lane.aggregateId,
  }
}

function reasonText(lane: LaneSummary): string {
  if (lane.reason === 'exhausted')
    return 'blocked: its dead letter exhausted its retries (onExhausted: block)'
  if (lane.reason === 'conflict') return 'parked: the consumer answered 409 (out of order)'
  if (lane.state === 'leased') return `leased until ${formatTime(lane.leasedUntil)}`
  return 'struggling: its head keeps failing'
}

function actions(ctx: PageContext, lane: LaneSummary) {
  if (!ctx.canAct) return ''
  const unblock =
    lane.state === 'blocked' ? actionForm(ctx, '/lanes/unblock', laneFields(lane), 'Unblock') : ''
  // A lane blocked by an exhausted event resumes by Unblock (its blocker stays dead and redrivable); skipping the
  // head there is refused by the producer, so the button is not offered.
  const skip =
    lane.head !== null && lane.reason !== 'exhausted' && lane.state !== 'leased'
      ? actionForm(ctx, '/lanes/skip-head', laneFields(lane), 'Skip head', { danger: true })
      : ''
  return html`${unblock} ${skip}`
}

/** `/lanes`: the lanes in one state, why, their head and last error, and (for users who can act) the fixes. */
export function lanesPage(
  ctx: PageContext,
  data: {
    readonly state: LaneState
    readonly subscription: string | undefined
    readonly subscriptions: readonly Subscription[]
    readonly lanes: readonly LaneSummary[]
  },
): string {
  const only: Record<string, string> =
    data.subscription === undefined ? {} : { subscription: data.subscription }
  const tabs = LANE_STATES.map((state) =>
    state === data.state
      ? html`<strong class="tab">${state}</strong>`
      : html`<span class="tab">${link(ctx, '/lanes', state, { state, ...only })}</span>`,
  )
  const rows = data.lanes.map((lane) => {
    const head = lane.head
    return html`<tr>
<td data-label="Subscription">${lane.subscriptionName ?? lane.subscriptionId}</td>
<td data-label="Lane">${lane.aggregateType}/${lane.aggregateId}</td>
<td data-label="Reason" class="reason">${reasonText(lane)}${lane.blockedAt ? html`<br><small>since ${formatTime(lane.blockedAt)}</small>` : ''}</td>
<td data-label="Blocker">${
      lane.blocker
        ? html`${link(ctx, `/events/${lane.blocker.eventId}`, `#${lane.blocker.sequence}`)} <span class="error-text">${
            lane.blocker.lastError ??
            (lane.blocker.lastStatus === null ? 'no answer' : `HTTP ${lane.blocker.lastStatus}`)
          }</span>`
        : '—'
    }</td>
<td data-label="Head">${
      head
        ? html`${link(ctx, `/events/${head.eventId}`, `#${head.sequence} ${head.eventType}`)}<br><small>${head.attempts} attempts${
            head.availableAt === null ? ', parked' : `, next ${formatTime(head.availableAt)}`
          }</small>`
        : '—'
    }</td>
<td data-label="Last error" class="error-text">${head?.lastError ?? ''}</td>
<td data-label="Pending" class="num">${lane.pending}</td>
${ctx.canAct ? html`<td>${actions(ctx, lane)}</td>` : ''}
</tr>`
  })
  const options = data.subscriptions.map(
    (subscription) =>
      html`<option value="${subscription.id}"${data.subscription === subscription.id ? html` selected` : ''}>${
        subscription.name ?? subscription.id
      }</option>`,
  )
  const body = html`<p class="tabs">${tabs}</p>
<form method="get" action="${ctx.base}/lanes" class="filters">
<input type="hidden" name="state" value="${data.state}">
<label>Subscription <select name="subscription"><option value="">any</option>${options}</select></label>
<button type="submit">Filter</button>
</form>
<table class="lanes">
<thead><tr><th>Subscription</th><th>Lane</th><th>Reason</th><th>Blocker</th><th>Head</th><th>Last error</th><th>Pending</th>${
    ctx.canAct ? html`<th></th>` : ''
  }</tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="8">No ${data.state} lanes.</td></tr>`}</tbody>
</table>`
  return layout(ctx, { title: `Lanes: ${data.state}`, body })
}
