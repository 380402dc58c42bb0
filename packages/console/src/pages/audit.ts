import type { AuditEntry } from '@outbox/producer'
import { html } from '../html.js'
import { formatTime, layout, link, type PageContext } from './layout.js'

/** `/audit`: who did what, newest first; JSON targets and results shown as compact text. */
export function auditPage(ctx: PageContext, entries: readonly AuditEntry[], limit: number): string {
  const rows = entries.map(
    (entry) => html`<tr>
<td data-label="When">${formatTime(entry.at)}</td><td data-label="Actor">${entry.actor}</td><td data-label="Action">${entry.action}</td>
<td data-label="Target"><code>${JSON.stringify(entry.target)}</code></td><td data-label="Result"><code>${JSON.stringify(entry.result)}</code></td>
</tr>`,
  )
  const older = entries.length === limit ? entries.at(-1)?.id : undefined
  const body = html`<table class="audit">
<thead><tr><th>When</th><th>Actor</th><th>Action</th><th>Target</th><th>Result</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="5">No actions recorded yet.</td></tr>`}</tbody>
</table>
${older ? html`<p>${link(ctx, '/audit', 'Older entries →', { before: older })}</p>` : ''}`
  return layout(ctx, { title: 'Audit log', body })
}
