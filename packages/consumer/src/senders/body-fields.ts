/**
 * Reading the common fields of a sender's JSON body, the same way in every shipped envelope reader, so that
 * "which part is `data`" and "what is the time" have one answer.
 */

/** A parsed JSON body that is an object (not an array, not a scalar). */
export type JsonObject = Readonly<Record<string, unknown>>

/** Whether a parsed JSON body is an object. */
export function isJsonObject(body: unknown): body is JsonObject {
  return typeof body === 'object' && body !== null && !Array.isArray(body)
}

/** The body's `data` member when it has one (even `null`), otherwise the whole body. */
export function dataOf(body: JsonObject): unknown {
  return Object.hasOwn(body, 'data') ? body.data : body
}

/**
 * A sender's event time as ISO-8601 (UTC), or undefined when it gives none usable: unix seconds as a number, or a
 * date string `Date.parse` reads. Only informative (the handler's `event.occurredAt`): a missing or odd time never
 * refuses an event.
 */
export function isoTime(value: unknown): string | undefined {
  const ms =
    typeof value === 'number' && Number.isFinite(value)
      ? value * 1000
      : typeof value === 'string'
        ? Date.parse(value)
        : Number.NaN
  // ±8.64e15 ms is the range a Date can hold; beyond it toISOString throws.
  return Number.isFinite(ms) && Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : undefined
}
