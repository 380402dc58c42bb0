import type { DeadLetterDetail, DeliveryAttempt } from '@outbox/producer'
import { html, lines, SafeHtml } from '../html.js'
import { actionForm, formatTime, layout, type PageContext } from './layout.js'

/** Subscription names by id, for the pages that show ids of the producer's rows. */
export type SubscriptionNames = ReadonlyMap<string, string | null>

/**
 * A subscription as an operator reads it: its name, with its id as the tooltip; its id where it has no name (or no
 * longer exists: the delivery log outlives a deleted subscription).
 */
function subscriptionLabel(names: SubscriptionNames, id: string, name = names.get(id)): SafeHtml {
  return name
    ? html`<span class="subscription" title="${id}" data-subscription-id="${id}">${name}</span>`
    : html`<span class="subscription" data-subscription-id="${id}">${id}</span>`
}

/**
 * The delivery log of one event: one line per attempt, newest first, as a terminal would show it, each line escaped
 * on its own. The subscription is named (its id in the tooltip, and in the key under the log).
 */
export function deliveryLog(attempts: readonly DeliveryAttempt[], names: SubscriptionNames): SafeHtml {
  return new SafeHtml(
    attempts
      .flatMap((attempt) => {
        const status = attempt.httpStatus === null ? 'no answer' : `HTTP ${attempt.httpStatus}`
        const took = attempt.durationMs === null ? '' : ` in ${attempt.durationMs} ms`
        const said = attempt.answer ?? attempt.error ?? ''
        const line = html`${`${formatTime(attempt.attemptedAt)}  ${attempt.outcome.padEnd(9)} ${status}${took}  subscription `}${subscriptionLabel(names, attempt.subscriptionId)}`
        return said ? [line.value, lines([`    ${said}`]).value] : [line.value]
      })
      .join('\n'),
  )
}

/** Under the log: each named subscription in it with its id, for an operator who needs the id (the CLI, a query). */
function subscriptionKey(attempts: readonly DeliveryAttempt[], names: SubscriptionNames): SafeHtml | string {
  const named = [...new Set(attempts.map((attempt) => attempt.subscriptionId))].filter((id) => names.get(id))
  if (named.length === 0) return ''
  return html`<p class="subscription-ids"><small>${named.map(
    (id, index) => html`${index > 0 ? ' · ' : ''}${names.get(id)}: <code>${id}</code>`,
  )}</small></p>`
}

/** One dead delivery of the event: where, why, the last answer, and the payload as pretty JSON. */
function deadDetail(ctx: PageContext, dead: DeadLetterDetail, names: SubscriptionNames): SafeHtml {
  return html`<section class="dead">
<h2>Dead letter in ${subscriptionLabel(names, dead.subscriptionId, dead.subscriptionName ?? names.get(dead.subscriptionId))}</h2>
<dl>
<dt>Subscription id</dt><dd><code>${dead.subscriptionId}</code></dd>
<dt>Aggregate</dt><dd>${dead.aggregateType}/${dead.aggregateId} #${dead.sequence}${dead.blocksLane ? ' (blocks its lane)' : ''}</dd>
<dt>Type</dt><dd>${dead.eventType}</dd>
<dt>Tenant</dt><dd>${dead.tenant ?? '—'}</dd>
<dt>Attempts</dt><dd>${dead.attempts}</dd>
<dt>Last status</dt><dd>${dead.lastStatus ?? 'no answer'}</dd>
<dt>Last error</dt><dd class="error-text">${dead.lastError ?? '—'}</dd>
<dt>Dead since</dt><dd>${formatTime(dead.deadAt)}</dd>
</dl>
${ctx.canAct ? actionForm(ctx, '/dead-letters/redrive', { eventId: dead.eventId, subscriptionId: dead.subscriptionId }, 'Redrive') : ''}
<h3>Last answer</h3>
${dead.lastAnswer === null ? html`<p>None logged.</p>` : html`<pre class="answer">${lines(dead.lastAnswer.split('\n'))}</pre>`}
<h3>Payload</h3>
<pre class="payload">${lines((JSON.stringify(dead.payload, null, 2) ?? 'null').split('\n'))}</pre>
</section>`
}

/** `/events/:eventId`: the event's dead-letter detail where it is dead, then its delivery log. */
export function eventPage(
  ctx: PageContext,
  data: {
    readonly eventId: string
    readonly dead: readonly DeadLetterDetail[]
    readonly attempts: readonly DeliveryAttempt[]
    /** Every subscription's name by id, to name the ones in the log. */
    readonly subscriptionNames: SubscriptionNames
  },
): string {
  const names = data.subscriptionNames
  const body = html`${data.dead.map((dead) => deadDetail(ctx, dead, names))}
<h2>Delivery log</h2>
${
  data.attempts.length > 0
    ? html`<pre class="log">${deliveryLog(data.attempts, names)}</pre>
${subscriptionKey(data.attempts, names)}`
    : html`<p>No attempts recorded (the relay's <code>deliveryLog</code> decides what is kept).</p>`
}`
  return layout(ctx, { title: `Event ${data.eventId}`, body })
}
