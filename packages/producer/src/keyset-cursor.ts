import { invalidOption } from './errors.js'

// A page cursor is `<time>_<row id>`: the time kept to the microsecond as text PostgreSQL reads back exactly (a
// JavaScript Date keeps milliseconds, so a cursor built from one would sort before its own row and repeat it).
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z)_(\d{1,19})$/

/** The cursor of a listed row: its time as microsecond text (from the query) and its id. */
export function encodeCursor(time: string, id: string): string {
  return `${time}_${id}`
}

/**
 * Reads the `after` option of a keyset-paginated list; undefined when absent. A malformed cursor is refused as an
 * `ERR_OUTBOX_INVALID_OPTION` on `after` that names what it must come from (`what`: "dead letter", …).
 */
export function decodeCursor(cursor: unknown, what: string): { time: string; id: string } | undefined {
  if (cursor === undefined) return undefined
  const match = typeof cursor === 'string' ? CURSOR.exec(cursor) : null
  if (!match || Number.isNaN(Date.parse(match[1]!))) {
    throw invalidOption(
      'after',
      cursor,
      (name, got) => `${name('after')} must be the cursor of a listed ${what}, got ${got}`,
    )
  }
  return { time: match[1]!, id: match[2]! }
}

/** Rows in one page of a list when `limit` is not given. */
export const DEFAULT_PAGE_LIMIT = 100

/** Reads the `limit` option of a paginated list: a positive integer, {@link DEFAULT_PAGE_LIMIT} when absent. */
export function pageLimit(limit: unknown): number {
  const value = limit ?? DEFAULT_PAGE_LIMIT
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw invalidOption(
      'limit',
      limit,
      (name, got) => `${name('limit')} must be a positive integer, got ${got}`,
    )
  }
  return value
}
