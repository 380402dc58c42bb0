/**
 * A duration in seconds as an operator reads it at a glance: `0s`, `3.2s`, `42s`, `5m 03s`, `2h 10m`, `3d 04h`.
 */
export function formatSeconds(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds <= 0) return '0s'
  if (seconds < 10) return `${Number(seconds.toFixed(1))}s`
  if (seconds < 60) return `${Math.floor(seconds)}s`
  const pad = (n: number) => String(n).padStart(2, '0')
  const whole = Math.floor(seconds)
  if (whole < 3600) return `${Math.floor(whole / 60)}m ${pad(whole % 60)}s`
  if (whole < 86_400) return `${Math.floor(whole / 3600)}h ${pad(Math.floor((whole % 3600) / 60))}m`
  return `${Math.floor(whole / 86_400)}d ${pad(Math.floor((whole % 86_400) / 3600))}h`
}

/** Milliseconds as {@link formatSeconds} shows them, keeping sub-second values in ms. */
export function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)}ms` : formatSeconds(ms / 1000)
}

/** Left-aligned columns separated by two spaces; the last column is not padded (no trailing blanks). */
export function formatTable(rows: readonly (readonly string[])[]): string[] {
  const widths: number[] = []
  for (const row of rows) {
    row.forEach((cell, index) => {
      widths[index] = Math.max(widths[index] ?? 0, cell.length)
    })
  }
  return rows.map((row) =>
    row
      .map((cell, index) => (index === row.length - 1 ? cell : cell.padEnd(widths[index] ?? 0)))
      .join('  ')
      .trimEnd(),
  )
}

/** Shortens text to `max` characters with an ellipsis, on one line. */
export function truncate(text: string, max: number): string {
  const line = text.replace(/\s+/g, ' ').trim()
  return line.length <= max ? line : `${line.slice(0, Math.max(0, max - 1))}…`
}

/**
 * Text a subscriber or an event supplied, made safe to print on a terminal: every control character (C0, DEL and
 * C1, which include ESC and CSI, so an answer body cannot move the cursor, recolour or retitle the operator's
 * terminal) is written as a visible escape (`\n`, `\t`, `\u001b`).
 */
export function escapeControls(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (char) => {
    if (char === '\n') return '\\n'
    if (char === '\r') return '\\r'
    if (char === '\t') return '\\t'
    return `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`
  })
}
