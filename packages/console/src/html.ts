/**
 * HTML that is safe to write into a page as it is: the output of {@link html} or {@link escapeHtml}. Anything else a
 * template interpolates goes through {@link escapeHtml}, so a value from the database can never become markup.
 */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

/**
 * Characters shown as `\uXXXX` text instead of written raw: C0 and C1 controls and DEL (a terminal escape or a NUL
 * from a subscriber's error body must stay visible, not act), the Unicode line and paragraph separators, and the
 * bidirectional overrides and isolates, which can make a text read differently from what it holds.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is this regex's purpose.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

const ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
}

function unicodeEscape(char: string): string {
  return `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`
}

/**
 * THE escape of the console: every dynamic value a page shows passes through it. HTML-escapes the text (safe in
 * element content and in quoted attributes) and shows each control character as `\u000a`-style text, so a
 * subscriber's answer or an event's payload reads as what it holds. Multi-line text the console lays out itself
 * (pretty JSON, a log) is escaped line by line with {@link lines}, so its own line breaks stay and a line feed
 * inside a value still shows as `\u000a`.
 *
 * @example
 * ```ts
 * import { escape } from '@outbox/console'
 * escapeHtml('<b>\u0007</b>').value // '&lt;b&gt;\\u0007&lt;/b&gt;'
 * ```
 */
export function escapeHtml(value: unknown): SafeHtml {
  if (value instanceof SafeHtml) return value
  const text =
    value === null || value === undefined ? '' : value instanceof Date ? value.toISOString() : String(value)
  return new SafeHtml(text.replace(CONTROL, unicodeEscape).replace(/[&<>"']/g, (char) => ENTITIES[char]!))
}

/** A value a template may interpolate: text (escaped), safe HTML (as is), or a list of them (concatenated). */
export type HtmlValue = SafeHtml | string | number | boolean | Date | null | undefined | readonly HtmlValue[]

function render(value: HtmlValue): string {
  if (Array.isArray(value)) return value.map(render).join('')
  if (value === false) return ''
  return escapeHtml(value as Exclude<HtmlValue, readonly HtmlValue[]>).value
}

/**
 * The template tag of every page: the literal parts are markup, each interpolated value goes through
 * {@link escapeHtml} unless it is already {@link SafeHtml}; arrays are joined, `false` renders nothing (for
 * `${cond && html`…`}`).
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0]!
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!
  return new SafeHtml(out)
}

/** Lines of text for a `<pre>`: each escaped on its own (see {@link escapeHtml}), joined by real line breaks. */
export function lines(text: readonly string[]): SafeHtml {
  return new SafeHtml(text.map((line) => escapeHtml(line).value).join('\n'))
}
