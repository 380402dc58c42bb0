import type { DeliveryAttempt } from '@outbox/producer'
import { html, lines, type SafeHtml } from '../html.js'
import { formatTime, layout, type PageContext } from './layout.js'

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

/** `/events/:eventId`: the event's dead-letter detail when it is dead somewhere, then its delivery log. */
export function eventPage(
  ctx: PageContext,
  data: { readonly eventId: string; readonly dead: SafeHtml; readonly attempts: readonly DeliveryAttempt[] },
): string {
  const body = html`${data.dead}
<h2>Delivery log</h2>
${
  data.attempts.length > 0
    ? html`<pre class="log">${lines(deliveryLogText(data.attempts))}</pre>`
    : html`<p>No attempts recorded (the relay's <code>deliveryLog</code> decides what is kept).</p>`
}`
  return layout(ctx, { title: `Event ${data.eventId}`, body })
}
