import type { DiscardResult, RedriveResult } from '@outbox/producer'
import type { DeadLetterQuery } from '../dead-letter-query.js'
import { html, type SafeHtml } from '../html.js'
import { actionForm, layout, link, type PageContext } from './layout.js'

function filterText(query: DeadLetterQuery): string {
  return Object.entries(query)
    .map(([name, value]) => `${name} = ${value}`)
    .join(', ')
}

function eventList(ctx: PageContext, ids: readonly string[]): SafeHtml {
  const shown = ids.slice(0, 200)
  return html`<ul class="events">${shown.map((id) => html`<li>${link(ctx, `/events/${id}`, id)}</li>`)}</ul>${
    ids.length > shown.length ? html`<p>… and ${ids.length - shown.length} more.</p>` : ''
  }`
}

const CANCEL = (ctx: PageContext) => link(ctx, '/dead-letters', 'Cancel')

/** The dry run of "redrive all matching": exactly what a confirm would redrive, and the confirm button. */
export function redrivePreviewPage(ctx: PageContext, query: DeadLetterQuery, result: RedriveResult): string {
  const body = html`<p>Filter: <code>${filterText(query)}</code></p>
<p>A redrive now would send <b>${result.deliveries.length}</b> dead deliveries (${result.redriven.length} events) again, each with its event id and sequence.</p>
${eventList(ctx, result.redriven)}
${
  result.deliveries.length > 0
    ? actionForm(
        ctx,
        '/dead-letters/redrive-matching',
        { ...query, confirm: '1' },
        `Redrive ${result.deliveries.length}`,
      )
    : ''
} ${CANCEL(ctx)}`
  return layout(ctx, { title: 'Redrive all matching: preview', body, refresh: false })
}

/**
 * The dry run of "discard all matching": what would be deleted and which lanes resumed — or the producer's refusal
 * when the matching dead letters include a lane's blocker and "also unblock their lanes" was not ticked.
 */
export function discardPreviewPage(
  ctx: PageContext,
  query: DeadLetterQuery,
  outcome: { readonly result: DiscardResult; readonly unblockLanes: boolean } | { readonly refusal: string },
): string {
  if ('refusal' in outcome) {
    const body = html`<p>Filter: <code>${filterText(query)}</code></p>
<p class="flash error" role="alert">${outcome.refusal}</p>
${actionForm(ctx, '/dead-letters/discard', { ...query, unblockLanes: '1' }, 'Preview again, unblocking their lanes', { danger: true })} ${CANCEL(ctx)}`
    return layout(ctx, { title: 'Discard all matching: refused', body, refresh: false })
  }
  const { result, unblockLanes } = outcome
  const body = html`<p>Filter: <code>${filterText(query)}</code></p>
<p>A discard now would delete <b>${result.discarded.length}</b> dead letters for good${
    result.unblocked.length > 0 ? html` and resume <b>${result.unblocked.length}</b> blocked lanes` : ''
  }.</p>
${eventList(
  ctx,
  result.discarded.map((one) => one.eventId),
)}
${
  result.unblocked.length > 0
    ? html`<h2>Lanes that resume</h2><ul>${result.unblocked.map(
        (lane) => html`<li>${lane.aggregateType}/${lane.aggregateId} (${lane.released} events released)</li>`,
      )}</ul>`
    : ''
}
${
  result.discarded.length > 0
    ? actionForm(
        ctx,
        '/dead-letters/discard',
        { ...query, confirm: '1', unblockLanes: unblockLanes ? '1' : undefined },
        `Discard ${result.discarded.length}`,
        { danger: true },
      )
    : ''
} ${CANCEL(ctx)}`
  return layout(ctx, { title: 'Discard all matching: preview', body, refresh: false })
}
