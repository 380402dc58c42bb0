import type { Authenticated } from '../auth.js'
import { CSRF_FIELD } from '../csrf.js'
import { type HtmlValue, html, type SafeHtml } from '../html.js'

/** What every page template gets besides its own data. */
export interface PageContext {
  /** The console's path prefix for links and forms ('' when mounted at the root). */
  readonly base: string
  readonly user: Authenticated
  /** Whether this user sees action buttons: the console's `actions` on and the user may act. */
  readonly canAct: boolean
  readonly refreshMs: number
  /** The outcome of the last action, from the redirect's sealed query value (see `flash.ts`). */
  readonly flash: { readonly kind: 'ok' | 'error'; readonly text: string } | undefined
}

/** A number of seconds or milliseconds as an operator reads it: `5 s`, `1.5 s`, `2 min`. */
export function formatInterval(ms: number): string {
  if (ms % 60_000 === 0) return `${ms / 60_000} min`
  return `${ms / 1000} s`
}

/** A point in time as text (UTC, to the second), or an em dash. */
export function formatTime(at: Date | null | undefined): string {
  return at ? `${at.toISOString().slice(0, 19).replace('T', ' ')} UTC` : '—'
}

/** A link inside the console. */
export function link(
  ctx: PageContext,
  path: string,
  label: HtmlValue,
  query?: Record<string, string>,
): SafeHtml {
  const search = query ? `?${new URLSearchParams(query)}` : ''
  return html`<a href="${ctx.base}${path}${search}">${label}</a>`
}

/**
 * A POST form with one button and the session's form token: every action is one of these (never a link, so no
 * prefetch or crawler can act).
 */
export function actionForm(
  ctx: PageContext,
  path: string,
  fields: Readonly<Record<string, string | undefined>>,
  label: string,
  options: { readonly danger?: boolean; readonly extra?: SafeHtml } = {},
): SafeHtml {
  return html`<form method="post" action="${ctx.base}${path}" class="action">${hiddenFields(ctx, fields)}${
    options.extra ?? ''
  }<button type="submit"${options.danger ? html` class="danger"` : ''}>${label}</button></form>`
}

/** Hidden inputs for `fields` (undefined ones left out) and the form token. */
export function hiddenFields(
  ctx: PageContext,
  fields: Readonly<Record<string, string | undefined>>,
): SafeHtml {
  const inputs = Object.entries(fields)
    .filter((entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== '')
    .map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)
  return html`<input type="hidden" name="${CSRF_FIELD}" value="${ctx.user.csrfToken ?? ''}">${inputs}`
}

const NAV = [
  ['/', 'Overview'],
  ['/lanes', 'Lanes'],
  ['/dead-letters', 'Dead letters'],
  ['/audit', 'Audit'],
] as const

/**
 * The page shell. Only `<main>` changes on a refresh (console.js swaps it); `charts` sit outside it so the charts
 * keep drawing across refreshes. `refresh: false` for pages an operator fills in or confirms (previews).
 */
export function layout(
  ctx: PageContext,
  page: {
    readonly title: string
    readonly body: SafeHtml
    readonly charts?: boolean
    readonly refresh?: boolean
  },
): string {
  const refresh = page.refresh ?? true
  const who = html`${ctx.user.actor}${ctx.canAct ? '' : ' (read only)'}`
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${page.title} · outbox console</title>
<link rel="stylesheet" href="${ctx.base}/assets/uplot.css">
<link rel="stylesheet" href="${ctx.base}/assets/console.css">
<script src="${ctx.base}/assets/uplot.js" defer></script>
<script src="${ctx.base}/assets/console.js" defer></script>
</head>
<body data-base="${ctx.base}" data-refresh-ms="${refresh ? ctx.refreshMs : 0}">
<header>
<strong>outbox console</strong>
<nav>${NAV.map(([path, label]) => link(ctx, path, label))}</nav>
<span class="who">${who}</span>
${
  ctx.user.via === 'session'
    ? html`<form method="post" action="${ctx.base}/logout" class="action">${hiddenFields(ctx, {})}<button type="submit">Log out</button></form>`
    : ''
}
</header>
${
  page.charts
    ? html`<section id="charts" class="charts">
<figure><figcaption>Delivered per minute (last hour)</figcaption><div id="chart-throughput" class="chart"></div></figure>
<figure><figcaption>Lag, seconds (sampled by this console)</figcaption><div id="chart-lag" class="chart"></div></figure>
</section>`
    : ''
}
<main>
<h1>${page.title}</h1>
${ctx.flash ? html`<p class="flash ${ctx.flash.kind}" role="status">${ctx.flash.text}</p>` : ''}
${page.body}
<p class="refresh">${
    refresh
      ? `This page refreshes every ${formatInterval(ctx.refreshMs)}.`
      : 'This page does not refresh on its own.'
  }</p>
</main>
</body>
</html>
`.value
}
