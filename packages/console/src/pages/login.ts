import { html } from '../html.js'

function shell(base: string, title: string, body: ReturnType<typeof html>): string {
  return html`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · outbox console</title><link rel="stylesheet" href="${base}/assets/console.css"></head>
<body><main class="narrow"><h1>${title}</h1>${body}</main></body>
</html>
`.value
}

/** `/login`: exchanges the console's token, typed once, for a session cookie. */
export function loginPage(
  base: string,
  options: { readonly failed: boolean; readonly tokenLogin: boolean; readonly throttled?: string },
): string {
  if (!options.tokenLogin) {
    return shell(
      base,
      'Sign in',
      html`<p>This console has no token login: sign in to the application that hosts it.</p>`,
    )
  }
  return shell(
    base,
    'Sign in',
    html`${options.failed ? html`<p class="flash error" role="alert">That token is not this console’s.</p>` : ''}${
      options.throttled !== undefined
        ? html`<p class="flash error" role="alert">${options.throttled}</p>`
        : ''
    }
<form method="post" action="${base}/login" class="login">
<label>Console token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Sign in</button>
</form>`,
  )
}

/** The 401 page for browsers: what happened and where to sign in. */
export function unauthorizedPage(base: string): string {
  return shell(
    base,
    'Sign-in required',
    html`<p>The outbox console needs a token or a session.</p><p><a href="${base}/login">Sign in</a></p>`,
  )
}

/** A page for a refused or failed request: its status line and why. */
export function problemPage(base: string, title: string, detail: string): string {
  return shell(base, title, html`<p>${detail}</p><p><a href="${base}/">Back to the overview</a></p>`)
}
