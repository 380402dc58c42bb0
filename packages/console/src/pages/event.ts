import type { DeadLetterDetail, DeliveryAttempt } from '@outbox/producer'
import { html, lines, type SafeHtml } from '../html.js'
import { actionForm, formatTime, layout, type PageContext } from './layout.js'

/** The delivery log of one event as text: one line per attempt, newest first, as a terminal would show it. */
export function deliveryLogText(attempts: readonly DeliveryAttempt[]): string[] {
  return attempts.flatMap((attempt) => {
    const status = attempt.httpStatus === null ? 'no answer' : `HTTP ${attempt.httpStatus}`
    const took = attempt.durationMs === null ? '' : ` in ${attempt.durationMs} ms`
    const said = attempt.answer ?? attempt.error ?? ''
    const line = `${formatTime(attempt.attemptedAt)}  ${attempt.outcome.padEnd(9)} ${status}${took}  subscription ${attempt.subscriptionId}`
    return said ? [line, `    ${said}`] : [line]
  })
}

/** One dead delivery of the event: where, why, the last answer, and the payload as pretty JSON. */
function deadDetail(ctx: PageContext, dead: DeadLetterDetail): SafeHtml {
  return html`<section class="dead">
<h2>Dead letter in ${dead.subscriptionName ?? dead.subscriptionId}</h2>
<dl>
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
  },
): string {
  const body = html`${data.dead.map((dead) => deadDetail(ctx, dead))}
<h2>Delivery log</h2>
${
  data.attempts.length > 0
    ? html`<pre class="log">${lines(deliveryLogText(data.attempts))}</pre>`
    : html`<p>No attempts recorded (the relay's <code>deliveryLog</code> decides what is kept).</p>`
}`
  return layout(ctx, { title: `Event ${data.eventId}`, body })
}
